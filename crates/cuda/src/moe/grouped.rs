//! Many-row MoE rounds through one grouped wgmma GEMM per weight kind (kernels/gemm_wgmma.cu
//! `gemm_wgmma_grouped`): the routed (row, expert) pairs sorted by expert and gathered, gate and
//! up of every chosen expert in one launch, the gated activation, down in another, and the
//! weighted combine. Each expert's rows fill 128-row token tiles of their own, so the launch's
//! tiles keep every SM busy where a matmul per expert (a few hundred rows each in a prefill)
//! would leave most of them idle. Every output element takes the wgmma GEMM's reduction order,
//! which is the order of every other matmul kernel, and the combine adds a row's experts in
//! increasing expert order as the other paths do: a row's output has the same bits whichever
//! path ran and whatever else is batched with it. Rounds of up to [`DEVICE_PLAN_ROWS`] rows plan
//! on the device (kernels/moe.cu `moe_plan_tiles`: no host round trip, so decode rounds past the
//! grouped GEMV's 64 rows can be recorded as graphs); larger ones (prefills) download the routing
//! and plan on the host ([`plan`]), in the same order.

use crate::ctx::{Ctx, Table};
use crate::device::{Arg, ptr};
use crate::ops::{bf16_of, gather_bf16};
use crate::smem::{WGMMA_SMEM, WGMMA_THREADS};
use crate::tensor::{CudaAct, CudaMat, padded};
use crate::tma::{BOX_ROWS, row_map, wgmma_fits};
use cudarc::driver::CudaSlice;
use std::sync::Arc;
use tf_backend::MoeParams;

/// Most rows a round may have to plan on the device (the decode rounds CUDA graphs record).
pub(super) const DEVICE_PLAN_ROWS: usize = 256;

/// Most pairs the device plan takes (kernels/moe.cu `MOE_PLAN_PAIRS`).
const DEVICE_PLAN_PAIRS: usize = 8192;

/// Threads of the device plan's block (kernels/moe.cu `MOE_PLAN_THREADS`: its counters).
const DEVICE_PLAN_THREADS: usize = 1024;

/// Marks a cache key as a table of tensor maps (the pointer tables' keys are addresses).
const MAPS_KEY: u64 = u64::MAX;

/// The grouped GEMM walks W blocks fastest (0): the CTAs running at once share a token tile of
/// one expert (its x rows from L2) rather than one W block index of many experts.
const TOKENS_FIRST: i32 = 0;

/// The experts' gate, up and down tensor maps on the device (`[gate | up | down]`, `ne` each,
/// 16 words a map), uploaded on first use; `None` unless every weight is bf16 with a map (Hopper)
/// of one shape per kind, gate and up alike, and both inner widths take the wgmma GEMM.
pub(super) fn maps<'a>(
    b: &Ctx,
    ne: usize,
    experts: &impl Fn(usize) -> [&'a CudaMat; 3],
) -> Option<Arc<CudaSlice<u64>>> {
    let first = experts(0);
    let (gn, gk) = first[0].shape();
    let dk = first[2].shape().1;
    if first[1].shape() != (gn, gk) || dk != gn || !wgmma_fits(gk.div_ceil(16)) || !wgmma_fits(dk.div_ceil(16)) {
        return None;
    }
    let mut key = vec![MAPS_KEY];
    for e in 0..ne {
        for (kind, m) in experts(e).into_iter().enumerate() {
            match m {
                CudaMat::Bf16 { w, map: Some(_), .. } if m.shape() == first[kind].shape() => {
                    key.push(ptr(w, &b.dev.stream));
                }
                _ => return None,
            }
        }
    }
    let mut c = b.caches();
    if let Some(t) = c.experts.get(&key) {
        return Some(Arc::clone(&t.dev));
    }
    let mut host = vec![0u64; 3 * ne * 16];
    for e in 0..ne {
        for (kind, m) in experts(e).into_iter().enumerate() {
            if let CudaMat::Bf16 { map: Some(map), .. } = m {
                host[(kind * ne + e) * 16..][..16].copy_from_slice(&map[..]);
            }
        }
    }
    let d = &b.dev;
    let (in_capture, t) = (d.capturing(), Arc::new(d.upload(&host)));
    if c.experts.len() >= super::KEEP_TABLES {
        c.experts.clear();
    }
    c.experts.insert(key, Table { dev: Arc::clone(&t), in_capture });
    Some(t)
}

/// The round's plan from its routing (`ids`: `[rows, k]`, every id below `ne`): per pair in
/// expert order (then pair order) its row, per pair its place in that order, and the token
/// tiles `[expert, first, end]` of each expert's places.
pub(super) fn plan(ids: &[u32], ne: usize, k: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut count = vec![0u32; ne + 1];
    for &e in ids {
        count[e as usize + 1] += 1;
    }
    for e in 0..ne {
        count[e + 1] += count[e];
    }
    let mut next = count.clone();
    let (mut pair_row, mut pos) = (vec![0u32; ids.len()], vec![0u32; ids.len()]);
    for (p, &e) in ids.iter().enumerate() {
        let at = next[e as usize];
        next[e as usize] += 1;
        pair_row[at as usize] = (p / k) as u32;
        pos[p] = at;
    }
    let mut tiles = Vec::new();
    for e in 0..ne {
        let (start, end) = (count[e] as usize, count[e + 1] as usize);
        for first in (start..end).step_by(BOX_ROWS) {
            tiles.extend([e as u32, first as u32, end as u32]);
        }
    }
    (pair_row, pos, tiles)
}

/// Whether a round of `rows` rows of top-`k` routing plans on the device.
pub(super) fn plans_on_device(rows: usize, k: usize) -> bool {
    rows <= DEVICE_PLAN_ROWS && rows * k <= DEVICE_PLAN_PAIRS
}

/// A round's plan on the device: `[pair_row | pos | tiles]` (pairs, pairs, 3 a token tile) and
/// the token tiles' count (on the host, or at `ntt_at` on the device).
struct DevicePlan {
    buf: CudaSlice<u32>,
    ntt: usize,
    ntt_at: Option<CudaSlice<u32>>,
}

/// The plan made on the host from the downloaded routing (`host_ids`, every id below `ne`).
fn host_plan(b: &Ctx, host_ids: &[u32], ne: usize, k: usize) -> DevicePlan {
    let (pair_row, pos, tiles) = plan(host_ids, ne, k);
    let packed: Vec<u32> = pair_row.iter().chain(&pos).chain(&tiles).copied().collect();
    DevicePlan { buf: b.dev.upload(&packed), ntt: tiles.len() / 3, ntt_at: None }
}

/// The plan made on the device from `ids` (`pairs` of them, within [`plans_on_device`]); `ntt`
/// is the most token tiles it can make, what the launches are sized for.
fn device_plan(b: &Ctx, ids: &CudaSlice<u32>, pairs: usize, ne: usize, k: usize) -> DevicePlan {
    let (d, s) = (&b.dev, &b.dev.stream);
    let most = pairs.div_ceil(BOX_ROWS) + ne.min(pairs);
    let (buf, ntt_at) = (d.alloc::<u32>(2 * pairs + 3 * most), d.alloc::<u32>(1));
    let base = ptr(&buf, s);
    let args = [
        Arg::P(ptr(ids, s)),
        Arg::I(pairs as i32),
        Arg::I(ne as i32),
        Arg::I(k as i32),
        Arg::P(base),
        Arg::P(base + 4 * pairs as u64),
        Arg::P(base + 8 * pairs as u64),
        Arg::P(ptr(&ntt_at, s)),
    ];
    d.launch(&d.k.moe_plan_tiles, (1, 1, 1), DEVICE_PLAN_THREADS as u32, (4 * pairs) as u32, &args);
    DevicePlan { buf, ntt: most, ntt_at: Some(ntt_at) }
}

/// The MoE of `x` through the grouped GEMM: `ids` / `w` the routing on the device (`[rows, k]`),
/// `host_ids` the same ids downloaded (`None`: the round plans on the device, within
/// [`plans_on_device`]), `maps` from [`maps`], `shapes` one expert's weights.
#[allow(clippy::too_many_arguments)]
pub(super) fn grouped(
    b: &Ctx,
    x: &CudaAct,
    ids: &CudaSlice<u32>,
    w: &CudaSlice<f32>,
    host_ids: Option<&[u32]>,
    maps: &CudaSlice<u64>,
    shapes: &[&CudaMat; 3],
    gated: bool,
    p: &MoeParams,
) -> CudaAct {
    let (d, s) = (&b.dev, &b.dev.stream);
    let (rows, k) = (x.rows, p.top_k);
    let ne = maps.len() / 48;
    let pairs = rows * k;
    let plan = match host_ids {
        Some(h) => host_plan(b, h, ne, k),
        None => device_plan(b, ids, pairs, ne, k),
    };
    let (ntt, ntt_at) = (plan.ntt, plan.ntt_at.as_ref().map_or(0, |n| ptr(n, s)));
    let base = ptr(&plan.buf, s);
    let (rows_at, pos_at, tiles_at) = (base, base + 4 * pairs as u64, base + 8 * pairs as u64);
    let xe = gather_bf16(b, x, rows_at, pairs);
    // Weights `kinds` of every routed expert over `xin`'s pairs, one output per kind.
    let run = |xin: &CudaAct, kinds: std::ops::Range<usize>| -> Vec<CudaAct> {
        let (n, kin) = shapes[kinds.start].shape();
        assert_eq!(xin.cols, kin, "moe: expert input width");
        let ys: Vec<CudaSlice<f32>> = kinds.clone().map(|_| d.alloc::<f32>(pairs * n)).collect();
        let xb = bf16_of(b, xin);
        let xmap = row_map(ptr(xb, s), pairs, padded(kin), BOX_ROWS).expect("moe: the gathered rows' tensor map");
        let nb = match shapes[kinds.start] {
            CudaMat::Bf16 { ntiles, .. } => ntiles.div_ceil(8),
            _ => unreachable!("maps() took bf16 weights only"),
        };
        let args = [
            Arg::P(ptr(maps, s) + (128 * kinds.start * ne) as u64),
            Arg::P(tiles_at),
            Arg::I(ne as i32),
            Arg::I(ntt as i32),
            Arg::P(ntt_at),
            Arg::M(xmap),
            Arg::P(ptr(&ys[0], s)),
            Arg::P(ptr(ys.last().unwrap_or(&ys[0]), s)),
            Arg::I(n as i32),
            Arg::I(nb as i32),
            Arg::I(kinds.len() as i32),
            Arg::I(kin.div_ceil(16) as i32),
            Arg::I(0),
            Arg::I(TOKENS_FIRST),
        ];
        let ctas = (nb * kinds.len() * ntt).min(d.num_sms).max(1);
        d.launch(&d.k.gemm_wgmma_grouped, (ctas as u32, 1, 1), WGMMA_THREADS, WGMMA_SMEM, &args);
        ys.into_iter().map(|y| CudaAct::new(y, pairs, n)).collect()
    };
    super::experts_and_combine(b, x, &xe, gated, p, (ids, w, pos_at), run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_sorts_pairs_by_expert_and_tiles_each_expert_apart() {
        // Three rows, top-2 of four experts; expert 2 unused.
        let ids = [3, 0, 0, 1, 3, 0];
        let (pair_row, pos, tiles) = plan(&ids, 4, 2);
        // Expert 0: pairs 1, 2, 5 (rows 0, 1, 2); expert 1: pair 3 (row 1); expert 3: pairs 0, 4.
        assert_eq!(pair_row, [0, 1, 2, 1, 0, 2]);
        assert_eq!(pos, [4, 0, 1, 3, 5, 2]);
        assert_eq!(tiles, [0, 0, 3, 1, 3, 4, 3, 4, 6]);
        for (p, &e) in ids.iter().enumerate() {
            assert_eq!(pair_row[pos[p] as usize] as usize, p / 2, "pair {p} of expert {e}");
        }
    }

    #[test]
    fn the_device_plans_pair_limit_is_the_kernels() {
        let src = include_str!("../../kernels/moe.cu");
        assert!(src.contains(&format!("#define MOE_PLAN_PAIRS {DEVICE_PLAN_PAIRS}\n")));
        assert!(src.contains(&format!("#define MOE_PLAN_THREADS {DEVICE_PLAN_THREADS}\n")));
        // Its dynamic shared memory (the ids) and static arrays (a counter a thread, an expert's
        // start, one more, and its first tile) fit the default 48 KB.
        const { assert!(4 * (DEVICE_PLAN_PAIRS + DEVICE_PLAN_THREADS + 2 * super::super::MAX_EXPERTS + 1) <= 48 * 1024) };
    }

    #[test]
    fn an_expert_past_one_token_tile_takes_several() {
        let ids: Vec<u32> = (0..300).map(|p| u32::from(p % 3 == 0)).collect();
        let (_, _, tiles) = plan(&ids, 2, 1);
        // 200 pairs of expert 0 (tiles at 0 and 128), 100 of expert 1 (at 200).
        assert_eq!(tiles, [0, 0, 200, 0, 128, 200, 1, 200, 300]);
    }
}
