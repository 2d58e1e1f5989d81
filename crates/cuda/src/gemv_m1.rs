//! Launching the one-row GEMV (kernels/gemv_m1.cu): decode at batch 1, x copied or made by a fused
//! RMSNorm, results stored or added into y.

use crate::CudaBackend;
use crate::device::Arg;
use crate::tensor::CudaMat;

/// Warps per block (kernels/gemm.cu `GEMV_W`), one per K segment.
const WARPS: usize = 8;
/// Bytes of one stage of one warp's ring: 16 W rows of 4 k tiles, padded (`M1_WS`).
const STAGE: usize = 16 * (4 * 32 + 16);
/// Shared memory an SM gives its blocks (H100/H200: 228 KB, 1 KB of it reserved per block).
const SM_SMEM: usize = 228 * 1024;

/// Where the GEMV's x row comes from.
pub(crate) enum M1Input {
    /// The bf16 copy of the row (device pointer, padded width).
    Copy(u64),
    /// RMSNorm of the f32 row `x` with weights `w`, in the order of `virt` virtual threads,
    /// `nq` of them a thread (see [`norm_fusable`]).
    Norm { x: u64, w: u64, eps: f32, one_plus: bool, nq: usize, virt: usize },
}

/// `(nq, virt)` when the GEMV can make the RMSNorm of a `cols`-wide row over groups of `group`
/// with `virt` virtual threads (ops.rs `norm_threads`): the norm spans the row, and the block's 256
/// threads can each play `nq` of them with the values in registers (kernels/gemv_m1.cu `m1_norm`).
pub(crate) fn norm_fusable(cols: usize, group: usize, virt: usize) -> Option<(usize, usize)> {
    let nq = match virt {
        v if v <= 256 => 1,
        512 => 2,
        1024 => 4,
        _ => return None,
    };
    (group == cols && cols <= (16 / nq) * virt).then_some((nq, virt))
}

/// Dynamic shared memory of a block with `st` ring stages and an x row of `kp` values (then two
/// tiles' segment sums).
fn smem(st: usize, kp: usize) -> usize {
    WARPS * st * STAGE + 2 * kp + 2 * WARPS * 2 * 32 * 4
}

/// Blocks of `bytes` dynamic shared memory (and at most 1 KB static) that fit an SM, up to three.
fn blocks_per_sm(bytes: usize) -> usize {
    (SM_SMEM / (bytes + 2048)).clamp(1, 3)
}

/// The largest dynamic shared memory a launch may ask for (what device.rs allows the kernels).
pub(crate) const MAX_SMEM: u32 = 227 * 1024 - 1024;

/// Three stages when three blocks then fit an SM (qkv's 384 tiles in one wave on 132 SMs), else
/// four (down_proj's longer x row).
fn stages(kp: usize) -> usize {
    if blocks_per_sm(smem(3, kp)) == 3 { 3 } else { 4 }
}

/// `ys[i] (+)= x @ ws[i]^T` for one row of x: false (nothing launched) unless every weight is bf16
/// and the shared memory fits, or the kernel is not turned on (profile.rs `M1Lab`).
pub(crate) fn gemv_m1(b: &CudaBackend, x: &M1Input, cols: usize, ws: &[&CudaMat], ys: &[u64], add: bool) -> bool {
    if !b.lab.on {
        return false;
    }
    let d = &b.dev;
    let tiles: Option<Vec<(u64, usize, usize)>> = ws
        .iter()
        .map(|w| match w {
            CudaMat::Bf16 { w, rows, ntiles, .. } => Some((crate::device::ptr(w, &d.stream), *rows, *ntiles)),
            CudaMat::Plain { .. } => None,
        })
        .collect();
    let Some(tiles) = tiles else { return false };
    let kt = cols.div_ceil(16);
    let kp = kt * 16;
    let norm = matches!(x, M1Input::Norm { .. });
    let st = if norm { 3 } else { b.lab.stages.unwrap_or_else(|| stages(kp)) };
    let bytes = smem(st, kp);
    if bytes > MAX_SMEM as usize {
        return false;
    }
    let (name, f, xb, xf, nw, eps, one_plus, virt) = match *x {
        M1Input::Copy(xb) => match st {
            3 => ("s3", &d.k.gemv_m1_s3, xb, 0, 0, 0.0, false, 0),
            _ => ("s4", &d.k.gemv_m1_s4, xb, 0, 0, 0.0, false, 0),
        },
        M1Input::Norm { x, w, eps, one_plus, nq, virt } => match nq {
            1 => ("norm1", &d.k.gemv_m1_norm1, 0, x, w, eps, one_plus, virt),
            2 => ("norm2", &d.k.gemv_m1_norm2, 0, x, w, eps, one_plus, virt),
            _ => ("norm4", &d.k.gemv_m1_norm4, 0, x, w, eps, one_plus, virt),
        },
    };
    let per_sm = b.lab.blocks.unwrap_or(3).min(resident(b, name, f, bytes as u32));
    let slots = per_sm.max(1) * d.num_sms;
    for (seg, yseg) in tiles.chunks(3).zip(ys.chunks(3)) {
        let at = |i: usize| seg.get(i).copied().unwrap_or((0, 0, 0));
        let ((w0, n0, t0), (w1, n1, t1), (w2, n2, t2)) = (at(0), at(1), at(2));
        let y = |i: usize| yseg.get(i).copied().unwrap_or(0);
        let ntot = t0 + t1 + t2;
        let args = [
            Arg::P(w0),
            Arg::P(y(0)),
            Arg::I(n0 as i32),
            Arg::I(t0 as i32),
            Arg::P(w1),
            Arg::P(y(1)),
            Arg::I(n1 as i32),
            Arg::I(t1 as i32),
            Arg::P(w2),
            Arg::P(y(2)),
            Arg::I(n2 as i32),
            Arg::I(ntot as i32),
            Arg::P(xb),
            Arg::P(xf),
            Arg::P(nw),
            Arg::I(cols as i32),
            Arg::I(kt as i32),
            Arg::I(kp as i32),
            Arg::F(eps),
            Arg::I(one_plus as i32),
            Arg::I(virt as i32),
            Arg::I(add as i32),
        ];
        d.launch(f, (ntot.min(slots) as u32, 1, 1), 32 * WARPS as u32, bytes as u32, &args);
    }
    true
}

/// Blocks of kernel `f` (`name`) with `bytes` of dynamic shared memory resident on one SM, as the
/// driver computes it (asked once per size).
fn resident(b: &CudaBackend, name: &'static str, f: &cudarc::driver::CudaFunction, bytes: u32) -> usize {
    let mut c = b.caches();
    if let Some(&(_, _, n)) = c.occupancy.iter().find(|e| e.0 == name && e.1 == bytes) {
        return n as usize;
    }
    let n = f.occupancy_max_active_blocks_per_multiprocessor(32 * WARPS as u32, bytes as usize, None).unwrap_or(1);
    c.occupancy.push((name, bytes, n));
    n as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_8b_shapes_fit_three_or_two_blocks_an_sm() {
        assert_eq!(stages(4096), 3);
        assert_eq!(blocks_per_sm(smem(3, 4096)), 3);
        assert_eq!(stages(12288), 4);
        assert_eq!(blocks_per_sm(smem(4, 12288)), 2);
    }

    #[test]
    fn the_norm_fuses_only_where_the_block_can_play_its_threads() {
        assert_eq!(norm_fusable(4096, 4096, 1024), Some((4, 1024)));
        assert_eq!(norm_fusable(2048, 2048, 512), Some((2, 512)));
        assert_eq!(norm_fusable(64, 64, 32), Some((1, 32)));
        assert_eq!(norm_fusable(8192, 8192, 1024), None, "values past the registers");
        assert_eq!(norm_fusable(1536, 1536, 384), None, "384 threads do not split over 256");
        assert_eq!(norm_fusable(4096, 128, 32), None, "per-head groups");
    }
}
