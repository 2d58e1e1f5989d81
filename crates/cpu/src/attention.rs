//! Causal paged attention with GQA, sliding window and score soft-capping: an online softmax
//! (flash-attention style) over key blocks fixed by absolute position, so a query's result is the
//! same whether its sequence is computed whole, in chunks across calls, or beside other sequences.
//!
//! Work is split over (tile of query rows, KV head); a tile gathers each block of keys once and
//! every row of it attends to its own part of the block, exactly as it would alone.

use crate::CpuBackend;
use crate::kv::{CpuKv, KvElem, dequantize_at};
use crate::simd::{Portable, Simd, Vops};
use rayon::prelude::*;
use tf_backend::reference::window_start;
use tf_backend::{AttnMeta, AttnParams, HostTensor, KvShape, SeqAttn};

/// Keys per block; block `b` holds absolute positions `b * KEY_BLOCK ..`, clipped to each row's
/// window and position.
const KEY_BLOCK: usize = 32;
/// Query rows of one sequence per task; they share each gathered block. Changes no result.
const ROW_TILE: usize = 16;

/// A pool's keys or values as attention reads them.
trait KvRows: Sync {
    /// The element a decode row reads in place.
    type Elem: KvElem;
    /// The values, where a decode row reads them in place (not a quantized pool's blocks).
    fn in_place(&self) -> Option<&[Self::Elem]>;
    /// `dst.len()` values from value `off` (a head's row) as f32.
    fn widen_at(&self, off: usize, dst: &mut [f32]);
}

impl<E: KvElem> KvRows for [E] {
    type Elem = E;
    fn in_place(&self) -> Option<&[E]> {
        Some(self)
    }
    #[inline(always)]
    fn widen_at(&self, off: usize, dst: &mut [f32]) {
        E::widen(&self[off..][..dst.len()], dst);
    }
}

/// A quantized pool's keys or values: blocks of `q`, dequantized by AVX2 where `avx2`.
struct QuantRows<'a> {
    q: tf_core::QuantType,
    bytes: &'a [u8],
    avx2: bool,
}

impl KvRows for QuantRows<'_> {
    type Elem = f32;
    fn in_place(&self) -> Option<&[f32]> {
        None
    }
    #[inline(always)]
    fn widen_at(&self, off: usize, dst: &mut [f32]) {
        dequantize_at(self.q, self.bytes, off, dst, self.avx2);
    }
}

/// Everything a task reads.
struct Job<'a, R: ?Sized> {
    q: &'a HostTensor,
    /// The pool's keys and the values attention reads (a latent pool's values are its keys).
    keys: &'a R,
    values: &'a R,
    shape: KvShape,
    p: &'a AttnParams,
    block_size: usize,
    /// Each query head's sink logit (gpt-oss), counted in its softmax's sum.
    sinks: Option<&'a [f32]>,
}

/// Rows `i0..i1` of sequence `seq` (indices within its rows this round) for KV head `kvh`.
struct Task {
    seq: usize,
    i0: usize,
    i1: usize,
    kvh: usize,
}

/// One worker's scratch space, reused across the tasks it runs.
struct Scratch {
    /// The block's keys of this KV head, gathered contiguous (`[KEY_BLOCK, head_dim]`) for a
    /// tile of several rows: pool slots sit a whole slot apart, a stride that makes the rows
    /// collide in L1 when every row of the tile reads them again.
    k: Vec<f32>,
    /// The block's values, gathered likewise.
    v: Vec<f32>,
    /// Offset of each gathered row: `t * head_dim`.
    offs: Vec<usize>,
    /// A single row's block read in place: each key's (and value's) offset in the pool.
    pool_offs: Vec<usize>,
    /// Scores of one row and head over the block.
    scores: Vec<f32>,
    /// Running maximum score per (row, query head) of the task.
    m: Vec<f32>,
    /// Running sum of `exp(score - m)` per (row, query head).
    l: Vec<f32>,
}

/// Writes K/V into their slots, then attends every (row tile, KV head) in parallel.
pub(crate) fn attention(
    cpu: &CpuBackend,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut CpuKv,
    meta: &AttnMeta,
    p: &AttnParams,
) -> HostTensor {
    check(q, k, v, kv.shape(), meta);
    kv.write(k, v, meta);
    attend_all(cpu, q, kv, meta, p, None)
}

/// [`attention`] with each query head's softmax also counting its sink logit `sinks[h]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_sinks(
    cpu: &CpuBackend,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut CpuKv,
    meta: &AttnMeta,
    p: &AttnParams,
    sinks: &[f32],
) -> HostTensor {
    check(q, k, v, kv.shape(), meta);
    assert_eq!(sinks.len(), p.num_heads, "attention: one sink a query head");
    kv.write(k, v, meta);
    attend_all(cpu, q, kv, meta, p, Some(sinks))
}

/// Attends every (row tile, KV head) in parallel over the K/V already in the pool, writing none.
pub(crate) fn attention_cached(
    cpu: &CpuBackend,
    q: &HostTensor,
    kv: &CpuKv,
    meta: &AttnMeta,
    p: &AttnParams,
) -> HostTensor {
    attend_all(cpu, q, kv, meta, p, None)
}

/// Every (row tile, KV head) in parallel over the K/V in the pool, sinks where given.
fn attend_all(
    cpu: &CpuBackend,
    q: &HostTensor,
    kv: &CpuKv,
    meta: &AttnMeta,
    p: &AttnParams,
    sinks: Option<&[f32]>,
) -> HostTensor {
    match kv {
        CpuKv::F32(pool) => attend_pool(cpu, q, (&pool.k[..], pool.values(), pool.shape), meta, p, sinks),
        CpuKv::Bf16(pool) => attend_pool(cpu, q, (&pool.k[..], pool.values(), pool.shape), meta, p, sinks),
        CpuKv::F16(pool) => attend_pool(cpu, q, (&pool.k[..], pool.values(), pool.shape), meta, p, sinks),
        CpuKv::Quant(pool) => {
            let avx2 = cpu.simd == Simd::Avx2;
            let keys = QuantRows { q: pool.q, bytes: &pool.k, avx2 };
            let values = QuantRows { q: pool.q, bytes: pool.values(), avx2 };
            attend_pool(cpu, q, (&keys, &values, pool.shape), meta, p, sinks)
        }
    }
}

/// [`attend_all`] over a pool's keys, the values attention reads, and its shape.
fn attend_pool<R: KvRows + ?Sized>(
    cpu: &CpuBackend,
    q: &HostTensor,
    (keys, values, shape): (&R, &R, KvShape),
    meta: &AttnMeta,
    p: &AttnParams,
    sinks: Option<&[f32]>,
) -> HostTensor {
    check_cached(q, shape, meta, p);
    let (d, group) = (p.head_dim, p.num_heads / p.num_kv_heads);
    let mut tasks = Vec::new();
    for (seq, s) in meta.seqs.iter().enumerate() {
        for i0 in (0..s.q_len).step_by(ROW_TILE) {
            let i1 = (i0 + ROW_TILE).min(s.q_len);
            tasks.extend((0..p.num_kv_heads).map(|kvh| Task { seq, i0, i1, kvh }));
        }
    }
    let job = Job { q, keys, values, shape, p, block_size: meta.block_size, sinks };
    let simd = cpu.simd;
    let init = || Scratch {
        k: vec![0.0; KEY_BLOCK * d],
        v: vec![0.0; KEY_BLOCK * d],
        offs: (0..KEY_BLOCK).map(|t| t * d).collect(),
        pool_offs: vec![0; KEY_BLOCK],
        scores: vec![0.0; KEY_BLOCK],
        m: vec![0.0; ROW_TILE * group],
        l: vec![0.0; ROW_TILE * group],
    };
    let run = |scratch: &mut Scratch, t: &Task| {
        let mut o = vec![0.0; (t.i1 - t.i0) * group * d];
        attend_dispatch(simd, &job, &meta.seqs[t.seq], t, &mut o, scratch);
        o
    };
    // One task (a decode row of one KV head) runs here: waking the pool for it costs more.
    let results: Vec<Vec<f32>> = if tasks.len() == 1 {
        vec![run(&mut init(), &tasks[0])]
    } else {
        cpu.pool.install(|| tasks.par_iter().map_init(init, run).collect())
    };
    let mut out = HostTensor::zeros(q.rows, p.num_heads * d);
    for (t, o) in tasks.iter().zip(&results) {
        let first = meta.seqs[t.seq].q_start + t.i0;
        for (i, heads) in o.chunks_exact(group * d).enumerate() {
            out.data[(first + i) * p.num_heads * d + t.kvh * group * d..][..group * d].copy_from_slice(heads);
        }
    }
    out
}

/// Panics on shapes that disagree (a bug in the caller, never outside input).
fn check(q: &HostTensor, k: &HostTensor, v: &HostTensor, kv: KvShape, meta: &AttnMeta) {
    let w = kv.num_kv_heads * kv.head_dim;
    assert_eq!((k.cols, v.cols), (w, w), "attention: k/v width");
    assert_eq!((k.rows, v.rows, meta.slot_mapping.len()), (q.rows, q.rows, q.rows), "attention: row counts");
}

/// Panics on shapes that disagree with the pool (a bug in the caller, never outside input).
fn check_cached(q: &HostTensor, kv: KvShape, meta: &AttnMeta, p: &AttnParams) {
    let heads_ok = p.num_kv_heads > 0 && p.head_dim > 0 && p.num_heads.is_multiple_of(p.num_kv_heads);
    assert!(heads_ok, "attention: {} heads over {} KV heads of width {}", p.num_heads, p.num_kv_heads, p.head_dim);
    assert_eq!(q.cols, p.num_heads * p.head_dim, "attention: q width");
    assert_eq!(
        (kv.num_kv_heads, kv.head_dim),
        (p.num_kv_heads, p.head_dim),
        "attention: KV heads or head_dim differ from the pool's"
    );
    assert_eq!(meta.block_size, kv.block_size, "attention: block size differs from the pool's");
    for s in &meta.seqs {
        assert!(s.q_start + s.q_len <= q.rows, "attention: a sequence's rows pass the batch");
    }
}

/// Runs [`attend`] with the kernels of `simd`.
fn attend_dispatch<R: KvRows + ?Sized>(
    simd: Simd,
    job: &Job<R>,
    seq: &SeqAttn,
    t: &Task,
    out: &mut [f32],
    s: &mut Scratch,
) {
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx2 {
        // SAFETY: a backend holds `Simd::Avx2` only where the CPU has it.
        unsafe { attend_avx2(job, seq, t, out, s) };
        return;
    }
    let _ = simd;
    // SAFETY: the portable kernels need no CPU feature.
    unsafe { attend::<Portable, R>(job, seq, t, out, s) }
}

/// [`attend`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_avx2<R: KvRows + ?Sized>(job: &Job<R>, seq: &SeqAttn, t: &Task, out: &mut [f32], s: &mut Scratch) {
    unsafe { attend::<crate::simd::Avx2, R>(job, seq, t, out, s) }
}

/// The task's rows and the query heads of its KV head into `out` (`[rows, group, head_dim]`,
/// zeroed), block by block of keys; each row sees `[window_start(pos), pos]` of every block.
/// A tile of several rows gathers each block once (widened to f32 from a 16-bit pool,
/// dequantized from a quantized one); a single row (decode) reads its keys and values in place
/// (16-bit ones widened in registers), where a gather would copy every byte it reads once, but
/// for a quantized pool's, which it gathers too. The same products in the same order either way.
///
/// # Safety
/// The CPU supports `V`'s instruction set.
#[inline(always)]
unsafe fn attend<V: Vops, R: KvRows + ?Sized>(job: &Job<R>, seq: &SeqAttn, t: &Task, out: &mut [f32], s: &mut Scratch) {
    let (p, bs, latent) = (job.p, job.block_size, job.shape.latent);
    let (d, w, kvh) = (p.head_dim, job.shape.num_kv_heads * job.shape.head_dim, t.kvh);
    let group = p.num_heads / p.num_kv_heads;
    let (first, last) = (seq.start_pos + t.i0, seq.start_pos + t.i1 - 1);
    let rows = t.i1 - t.i0;
    s.m[..rows * group].fill(f32::NEG_INFINITY);
    s.l[..rows * group].fill(0.0);
    let mut j0 = window_start(first, p.window);
    let pool = if rows == 1 { job.keys.in_place().zip(job.values.in_place()) } else { None };
    while j0 <= last {
        let j1 = ((j0 / KEY_BLOCK + 1) * KEY_BLOCK).min(last + 1);
        for (u, j) in (j0..j1).enumerate() {
            let off = (seq.block_table[j / bs] as usize * bs + j % bs) * w + kvh * d;
            if pool.is_some() {
                s.pool_offs[u] = off;
                continue;
            }
            job.keys.widen_at(off, &mut s.k[u * d..][..d]);
            if !latent {
                job.values.widen_at(off, &mut s.v[u * d..][..d]);
            }
        }
        let st = (&mut s.scores[..], &mut s.m[..], &mut s.l[..]);
        // SAFETY (both arms): forwarded from the caller.
        if let Some((keys, values)) = pool {
            let pool = (keys, values, &s.pool_offs[..]);
            unsafe { attend_block::<V, R::Elem>(job, seq, t, (j0, j1), pool, st, out) };
        } else {
            let values = if latent { &s.k[..] } else { &s.v[..] };
            unsafe { attend_block::<V, f32>(job, seq, t, (j0, j1), (&s.k, values, &s.offs), st, out) };
        }
        j0 = j1;
    }
    // A row that sees no key (a zero window) keeps zeros, as in the reference. A sink adds
    // `exp(sink - m)` to the sum (its weight, with no value).
    for (rh, (acc, &l)) in out.chunks_exact_mut(d).zip(&s.l).enumerate().filter(|(_, (_, l))| **l > 0.0) {
        let sink = job.sinks.map_or(0.0, |sk| (sk[kvh * group + rh % group] - s.m[rh]).exp());
        // SAFETY: forwarded from the caller.
        unsafe { V::scale(acc, 1.0 / (l + sink)) };
    }
}

/// The task's rows over keys `j0..j1`: the rows of `keys` and `values` at `offs` (a pool's
/// rows in place, or the block gathered), each row clipped to its window and position;
/// `(scores, m, l)` the task's scratch and running state.
///
/// # Safety
/// The CPU supports `V`'s instruction set.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn attend_block<V: Vops, X: KvElem>(
    job: &Job<'_, impl KvRows + ?Sized>,
    seq: &SeqAttn,
    t: &Task,
    (j0, j1): (usize, usize),
    (keys, values, offs): (&[X], &[X], &[usize]),
    (scores, m, l): (&mut [f32], &mut [f32], &mut [f32]),
    out: &mut [f32],
) {
    let p = job.p;
    let (d, kvh, group) = (p.head_dim, t.kvh, p.num_heads / p.num_kv_heads);
    let first = seq.start_pos + t.i0;
    for i in 0..t.i1 - t.i0 {
        let pos = first + i;
        let (a, b) = (j0.max(window_start(pos, p.window)), j1.min(pos + 1));
        if a >= b {
            continue;
        }
        let q = &job.q.row(seq.q_start + t.i0 + i)[kvh * group * d..][..group * d];
        for h in 0..group {
            let rh = i * group + h;
            // SAFETY: forwarded from the caller.
            unsafe {
                update::<V, X>(
                    p,
                    &q[h * d..][..d],
                    (keys, values),
                    &offs[a - j0..b - j0],
                    scores,
                    (&mut m[rh], &mut l[rh]),
                    &mut out[rh * d..][..d],
                )
            };
        }
    }
}

/// One query head over one block of keys (the rows of `keys` and `values` at `offs`, one a
/// key): scores, then the online-softmax update of the running max `m`, sum `l` and
/// unnormalised output `acc`.
///
/// # Safety
/// The CPU supports `V`'s instruction set.
#[inline(always)]
unsafe fn update<V: Vops, X: KvElem>(
    p: &AttnParams,
    q: &[f32],
    (keys, values): (&[X], &[X]),
    offs: &[usize],
    scores: &mut [f32],
    (m, l): (&mut f32, &mut f32),
    acc: &mut [f32],
) {
    let d = q.len();
    let n = offs.len();
    let key = |u: usize| &keys[offs[u]..][..d];
    let scores = &mut scores[..n];
    let (sc4, sc1) = scores.as_chunks_mut::<4>();
    for (c, sc) in sc4.iter_mut().enumerate() {
        let u = 4 * c;
        // SAFETY: forwarded from the caller.
        *sc = unsafe { V::dot4(q, [key(u), key(u + 1), key(u + 2), key(u + 3)]) };
    }
    for (u, sc) in sc1.iter_mut().enumerate() {
        // SAFETY: forwarded from the caller.
        *sc = unsafe { V::dot(q, key(4 * sc4.len() + u)) };
    }
    let mut block_max = f32::NEG_INFINITY;
    for sc in scores.iter_mut() {
        let x = *sc * p.scale;
        *sc = p.softcap.map_or(x, |c| c * (x / c).tanh());
        block_max = block_max.max(*sc);
    }
    if block_max > *m {
        let alpha = (*m - block_max).exp();
        *l *= alpha;
        // SAFETY: forwarded from the caller.
        unsafe { V::scale(acc, alpha) };
        *m = block_max;
    }
    for sc in scores.iter_mut() {
        *sc = (*sc - *m).exp();
        *l += *sc;
    }
    // SAFETY: forwarded from the caller.
    unsafe { V::accumulate(acc, scores, values, offs) };
}

#[cfg(test)]
mod tests {
    use crate::testutil::{Rng, bits, concat, cpu, cpu_kv, rel_err, simds, sub};
    use crate::{CpuBackend, CpuKv, KV_DTYPES, Simd};
    use tf_backend::on_host::rounded_tensor;
    use tf_backend::{AttnMeta, AttnParams, Backend, HostTensor, KvShape, RefBackend, SeqAttn};
    use tf_core::DType;

    const BLOCK: usize = 16;

    /// One sequence's whole input: q, k, v for `len` tokens and its block table.
    struct Seq {
        q: HostTensor,
        k: HostTensor,
        v: HostTensor,
        table: Vec<u32>,
    }

    fn params(window: Option<usize>, softcap: Option<f32>) -> AttnParams {
        AttnParams { num_heads: 6, num_kv_heads: 2, head_dim: 40, scale: 40f32.powf(-0.5), window, softcap }
    }

    /// [`params`] for a pool of `dtype`: heads of 96 (three blocks) for a quantized pool.
    fn params_for(dtype: DType, window: Option<usize>, softcap: Option<f32>) -> AttnParams {
        match dtype {
            DType::Quant(_) => AttnParams { head_dim: 96, scale: 96f32.powf(-0.5), ..params(window, softcap) },
            _ => params(window, softcap),
        }
    }

    fn pool(p: &AttnParams) -> KvShape {
        KvShape { num_blocks: 64, block_size: BLOCK, num_kv_heads: p.num_kv_heads, head_dim: p.head_dim, latent: false }
    }

    /// A random sequence of `len` tokens whose blocks are `first, first + 3, ...` (scattered).
    fn seq(rng: &mut Rng, p: &AttnParams, len: usize, first: u32) -> Seq {
        let scale = |mut t: HostTensor| {
            t.data.iter_mut().for_each(|v| *v *= 3.0);
            t
        };
        Seq {
            q: scale(rng.tensor(len, p.num_heads * p.head_dim)),
            k: scale(rng.tensor(len, p.num_kv_heads * p.head_dim)),
            v: rng.tensor(len, p.num_kv_heads * p.head_dim),
            table: (0..len.div_ceil(BLOCK) as u32).map(|b| first + 3 * b).collect(),
        }
    }

    /// `s` with its K and V rounded as a pool of `dtype` stores them.
    fn rounded_seq(s: &Seq, dtype: DType) -> Seq {
        let round = |t: &HostTensor| rounded_tensor(t.clone(), dtype);
        Seq { q: s.q.clone(), k: round(&s.k), v: round(&s.v), table: s.table.clone() }
    }

    /// Runs rows `start..start + n` of each `(seq, start, n)` as one round on `b`.
    fn round<B: Backend<Act = HostTensor>>(
        b: &B,
        kv: &mut B::Kv,
        p: &AttnParams,
        parts: &[(&Seq, usize, usize)],
    ) -> HostTensor {
        let mut meta = AttnMeta { block_size: BLOCK, ..AttnMeta::default() };
        let (mut qs, mut ks, mut vs) = (vec![], vec![], vec![]);
        for &(s, start, n) in parts {
            let one = AttnMeta::single(start, n, s.table.clone(), BLOCK);
            meta.seqs.push(SeqAttn { q_start: meta.slot_mapping.len(), ..one.seqs[0].clone() });
            meta.slot_mapping.extend(one.slot_mapping);
            qs.push(sub(&s.q, start, n));
            ks.push(sub(&s.k, start, n));
            vs.push(sub(&s.v, start, n));
        }
        let cat = |ts: &[HostTensor]| concat(&ts.iter().collect::<Vec<_>>());
        b.attention(&cat(&qs), &cat(&ks), &cat(&vs), kv, &meta, p)
    }

    /// A sequence prefilled in chunks of `chunk` rows over successive calls.
    fn chunked(b: &CpuBackend, p: &AttnParams, s: &Seq, chunk: usize) -> HostTensor {
        let mut kv = b.kv(pool(p)).expect("pool");
        let len = s.q.rows;
        let outs: Vec<HostTensor> =
            (0..len).step_by(chunk).map(|start| round(b, &mut kv, p, &[(s, start, chunk.min(len - start))])).collect();
        concat(&outs.iter().collect::<Vec<_>>())
    }

    const OPTIONS: [(Option<usize>, Option<f32>); 3] = [(None, None), (Some(37), None), (Some(100), Some(5.0))];

    #[test]
    fn chunked_prefill_equals_whole_bit_for_bit() {
        let mut rng = Rng::new(30);
        for (simd, dtype) in simds().into_iter().flat_map(|s| KV_DTYPES.map(|d| (s, d))) {
            let b = cpu_kv(2, simd, dtype);
            for (window, softcap) in OPTIONS {
                let p = params_for(dtype, window, softcap);
                let s = seq(&mut rng, &p, 150, 1);
                let whole = chunked(&b, &p, &s, 150);
                for chunk in [1, 3, 7] {
                    let got = chunked(&b, &p, &s, chunk);
                    assert_eq!(bits(&got), bits(&whole), "{simd:?} {dtype} chunk {chunk} {window:?}");
                }
            }
        }
    }

    /// A 16-bit or quantized pool gives the reference's attention over K and V rounded to its
    /// type (each value rounded, each row quantized, once, as it is written), and not the f32
    /// pool's.
    #[test]
    fn a_half_or_quantized_pool_attends_over_its_rounded_values() {
        let mut rng = Rng::new(35);
        for (simd, dtype) in simds().into_iter().flat_map(|s| KV_DTYPES[1..].iter().map(move |&d| (s, d))) {
            for (window, softcap) in OPTIONS {
                let p = params_for(dtype, window, softcap);
                let s = seq(&mut rng, &p, 120, 1);
                let got = chunked(&cpu_kv(2, simd, dtype), &p, &s, 120);
                let r = rounded_seq(&s, dtype);
                let mut kv = RefBackend.kv(pool(&p)).expect("pool");
                let want = round(&RefBackend, &mut kv, &p, &[(&r, 0, 120)]);
                let e = rel_err(&got.data, &want.data);
                assert!(e < 1e-5, "{simd:?} {dtype} {window:?} {softcap:?}: {e}");
                let full = chunked(&cpu(2, simd), &p, &s, 120);
                assert!(rel_err(&got.data, &full.data) > 1e-5, "{dtype}: the values were rounded");
            }
        }
    }

    #[test]
    fn a_sequence_alone_equals_it_batched_with_others() {
        let mut rng = Rng::new(31);
        for (simd, dtype) in simds().into_iter().flat_map(|s| KV_DTYPES.map(|d| (s, d))) {
            for (window, softcap) in OPTIONS {
                let p = params_for(dtype, window, softcap);
                let (a, x, y) = (seq(&mut rng, &p, 90, 0), seq(&mut rng, &p, 70, 1), seq(&mut rng, &p, 130, 2));
                // Prefill all three in earlier rounds, then advance each by a few tokens.
                let b1 = cpu_kv(1, simd, dtype);
                let mut kv = b1.kv(pool(&p)).expect("pool");
                round(&b1, &mut kv, &p, &[(&a, 0, 80)]);
                let alone = round(&b1, &mut kv, &p, &[(&a, 80, 10)]);
                let b2 = cpu_kv(2, simd, dtype);
                let mut kv = b2.kv(pool(&p)).expect("pool");
                round(&b2, &mut kv, &p, &[(&x, 0, 64), (&a, 0, 80), (&y, 0, 125)]);
                let batched = round(&b2, &mut kv, &p, &[(&x, 64, 6), (&a, 80, 10), (&y, 125, 5)]);
                assert_eq!(bits(&sub(&batched, 6, 10)), bits(&alone), "{simd:?} {dtype} {window:?}");
            }
        }
    }

    /// One attention call: q, k, v, the pool, the round's metadata.
    type Attend<'a, K> = &'a dyn Fn(&HostTensor, &HostTensor, &HostTensor, &mut K, &AttnMeta) -> HostTensor;

    /// Attention as `be` computes it over `s` in chunks of `chunk` rows, each a call, over the
    /// pool `b` makes.
    fn by_chunks<B: Backend>(b: &B, be: Attend<'_, B::Kv>, p: &AttnParams, s: &Seq, chunk: usize) -> HostTensor {
        let mut kv = b.kv(pool(p)).expect("pool");
        let len = s.q.rows;
        let outs: Vec<HostTensor> = (0..len)
            .step_by(chunk)
            .map(|start| {
                let n = chunk.min(len - start);
                let meta = AttnMeta::single(start, n, s.table.clone(), BLOCK);
                be(&sub(&s.q, start, n), &sub(&s.k, start, n), &sub(&s.v, start, n), &mut kv, &meta)
            })
            .collect();
        concat(&outs.iter().collect::<Vec<_>>())
    }

    #[test]
    fn sinks_match_the_reference_and_chunked_equals_whole() {
        // Sinks of either sign and one far above every score (most weight to the sink).
        let sinks = [0.5, -2.0, 3.0, 40.0, -0.25, 1.0];
        let mut rng = Rng::new(33);
        for simd in simds() {
            let b = cpu(2, simd);
            for window in [None, Some(37)] {
                let p = params(window, None);
                let s = seq(&mut rng, &p, 100, 1);
                let cpu_sinks = |q: &HostTensor, k: &HostTensor, v: &HostTensor, kv: &mut CpuKv, m: &AttnMeta| {
                    b.attention_sinks(q, k, v, kv, m, &p, &sinks)
                };
                let ref_sinks =
                    |q: &HostTensor, k: &HostTensor, v: &HostTensor, kv: &mut tf_backend::HostKv, m: &AttnMeta| {
                        RefBackend.attention_sinks(q, k, v, kv, m, &p, &sinks)
                    };
                let plain = |q: &HostTensor, k: &HostTensor, v: &HostTensor, kv: &mut CpuKv, m: &AttnMeta| {
                    b.attention(q, k, v, kv, m, &p)
                };
                let whole = by_chunks(&b, &cpu_sinks, &p, &s, 100);
                let want = by_chunks(&RefBackend, &ref_sinks, &p, &s, 100);
                assert!(rel_err(&whole.data, &want.data) < 1e-5, "{simd:?} {window:?}");
                let chunks = by_chunks(&b, &cpu_sinks, &p, &s, 7);
                assert_eq!(bits(&chunks), bits(&whole), "{simd:?} {window:?}: chunks of 7");
                // The sink takes weight: every head's output shrinks against attention without it,
                // the fourth head's (sink 40) to almost nothing.
                let without = by_chunks(&b, &plain, &p, &s, 100);
                let norm = |t: &HostTensor, h: usize| -> f32 {
                    (0..t.rows).map(|r| t.row(r)[h * 40..(h + 1) * 40].iter().map(|x| x * x).sum::<f32>()).sum()
                };
                for h in 0..6 {
                    assert!(norm(&whole, h) < norm(&without, h), "head {h}");
                }
                assert!(norm(&whole, 3) < 1e-6 * norm(&without, 3));
            }
        }
    }

    #[test]
    fn matches_the_reference() {
        let mut rng = Rng::new(32);
        for simd in simds() {
            for (window, softcap) in OPTIONS {
                let p = params(window, softcap);
                let (a, x) = (seq(&mut rng, &p, 150, 0), seq(&mut rng, &p, 40, 1));
                let b = cpu(2, simd);
                let (mut kv1, mut kv2) = (b.kv(pool(&p)).expect("pool"), RefBackend.kv(pool(&p)).expect("pool"));
                for parts in [[(&a, 0, 100), (&x, 0, 33)], [(&a, 100, 50), (&x, 33, 7)]] {
                    let got = round(&b, &mut kv1, &p, &parts);
                    let want = round(&RefBackend, &mut kv2, &p, &parts);
                    let e = rel_err(&got.data, &want.data);
                    assert!(e < 1e-5, "{simd:?} {window:?} {softcap:?}: {e}");
                }
                let CpuKv::F32(kv1) = kv1 else { panic!("an f32 pool by default") };
                assert_eq!(kv1.k, kv2.k);
                assert_eq!(kv1.v, kv2.v);
            }
        }
    }

    #[test]
    fn a_latent_pool_attends_over_its_keys_as_values() {
        // One KV head (MLA's latent row): a pool keeping K alone gives what a full pool gives
        // when each token's V is its K, bit for bit, and keeps no V.
        let mut rng = Rng::new(34);
        for (simd, dtype) in simds().into_iter().flat_map(|s| KV_DTYPES.map(|d| (s, d))) {
            let p = AttnParams { num_kv_heads: 1, ..params_for(dtype, None, None) };
            let mut s = seq(&mut rng, &p, 70, 0);
            s.v = s.k.clone();
            let b = cpu_kv(2, simd, dtype);
            let mut full = b.kv(pool(&p)).expect("pool");
            let mut latent = b.kv(KvShape { latent: true, ..pool(&p) }).expect("pool");
            let mut reference = RefBackend.kv(KvShape { latent: true, ..pool(&p) }).expect("pool");
            let r = rounded_seq(&s, dtype);
            for (parts, rparts) in [([(&s, 0, 50)], [(&r, 0, 50)]), ([(&s, 50, 20)], [(&r, 50, 20)])] {
                let want = round(&b, &mut full, &p, &parts);
                assert_eq!(bits(&round(&b, &mut latent, &p, &parts)), bits(&want), "{simd:?} {dtype}");
                let e = rel_err(&round(&RefBackend, &mut reference, &p, &rparts).data, &want.data);
                assert!(e < 1e-5, "{simd:?} {dtype}: {e}");
            }
            let blocks = [0, 1];
            assert_eq!(b.read_kv_blocks(&latent, &blocks), b.read_kv_blocks(&full, &blocks), "sessions see one layout");
            let empty = match latent {
                CpuKv::F32(l) => l.v.is_empty(),
                CpuKv::Bf16(l) => l.v.is_empty(),
                CpuKv::F16(l) => l.v.is_empty(),
                CpuKv::Quant(l) => l.v.is_empty(),
            };
            assert!(empty, "a latent pool keeps no V");
        }
    }

    #[test]
    fn avx2_and_portable_agree_bit_for_bit() {
        if !Simd::Avx2.available() {
            return;
        }
        let mut rng = Rng::new(33);
        let p = params(Some(100), Some(5.0));
        let s = seq(&mut rng, &p, 150, 0);
        assert_eq!(
            bits(&chunked(&cpu(2, Simd::Avx2), &p, &s, 150)),
            bits(&chunked(&cpu(2, Simd::Portable), &p, &s, 150))
        );
    }
}
