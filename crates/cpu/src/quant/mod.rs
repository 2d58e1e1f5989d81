//! Batch-invariant `x @ w^T` over GGML block-quantized weights kept quantized in memory.
//!
//! Two numerics, chosen per backend by [`QuantActs`]:
//! - `Int8` (llama.cpp's, the default): each activation row is quantized once per call to 8-bit
//!   blocks ([`act`]), and each weight block meets them in integer dot products (`maddubs` /
//!   `madd` on AVX2, `dpbusd` / `dpwssd` with AVX-VNNI or AVX-512 VNNI: [`IntDot`], chosen once
//!   per backend, all giving the same integers), scaled in f32 per block. The integers and the f32 steps are fixed per output
//!   element ([`spec`]), so a row's result depends on that row alone, whatever the batch, tile or
//!   threads. It is the default because the weights are already rounded to 2-8 bits, the 8-bit
//!   activations add far less error than that, and it is what makes quantized weights as fast as
//!   llama.cpp, whose numerics it shares.
//! - `F32`: each weight block is dequantized exactly as ggml does and multiplied with the f32
//!   activations in the fixed order of [`crate::simd`]: the plain dequantize-then-f32 result, as
//!   Hugging Face transformers computes it from a GGUF file; for golden comparisons with it.
//!
//! Both are batch invariant bit for bit. Work is split over output features only, as in
//! [`crate::matmul`]; without AVX2 both run in plain Rust with the same results.

mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_blocks;
#[cfg(target_arch = "x86_64")]
mod dots;
mod isa;
mod spec;
#[cfg(test)]
pub(crate) mod tests;

use crate::matmul::{par_columns, par_columns_many};
use crate::simd::{Portable, Simd};
use act::{ActBlock, Q8K, Q8x2, quantize_rows};
pub use isa::IntDot;
use rayon::ThreadPool;
use std::ops::Range;
use std::sync::OnceLock;
use tf_backend::{HostMat, HostTensor};
use tf_core::{DType, QuantType};

/// How activations meet block-quantized weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuantActs {
    /// Activation rows quantized to 8-bit blocks (each value rounded to the nearest of 255 levels
    /// spanning its block), integer dot products: llama.cpp's numerics, at its speed.
    #[default]
    Int8,
    /// f32 activations against exactly dequantized weights: the dequantize-then-f32 result
    /// (what Hugging Face transformers computes from a GGUF file), at a multiple of the cost.
    F32,
}

impl QuantActs {
    /// Lower-case name for logs.
    pub fn name(self) -> &'static str {
        match self {
            QuantActs::Int8 => "int8",
            QuantActs::F32 => "f32",
        }
    }
}

/// One activation tensor's quantized forms, each made at most once and shared by every weight
/// that meets it (q / k / v, gate / up: [`matmul_many`]); a weight's result is the same as from
/// its own [`matmul`].
pub(crate) struct Prepared<'x> {
    x: &'x HostTensor,
    k: OnceLock<Vec<Q8K>>,
    b32: OnceLock<Vec<Q8x2>>,
    /// The 32-weight blocks' codes plus 128 (signed types on VNNI).
    xu: OnceLock<Vec<[u8; 64]>>,
}

impl<'x> Prepared<'x> {
    /// Nothing made yet.
    pub(crate) fn new(x: &'x HostTensor) -> Prepared<'x> {
        Prepared { x, k: OnceLock::new(), b32: OnceLock::new(), xu: OnceLock::new() }
    }
}

/// `x[rows, in] @ w[out, in]^T` for a quantized `w`.
///
/// `dot` is available and not portable only where `simd` is AVX2 (the backend checks both).
pub(crate) fn matmul(
    pool: &ThreadPool,
    simd: Simd,
    dot: IntDot,
    acts: QuantActs,
    x: &HostTensor,
    w: &HostMat,
) -> HostTensor {
    matmul_prepared(pool, simd, dot, acts, &Prepared::new(x), w)
}

/// [`matmul`] of one `x` by each of `ws`, its activations quantized once for all of them and
/// every product's columns in one parallel pass.
pub(crate) fn matmul_many(
    pool: &ThreadPool,
    simd: Simd,
    dot: IntDot,
    acts: QuantActs,
    x: &HostTensor,
    ws: &[&HostMat],
) -> Vec<HostTensor> {
    let p = Prepared::new(x);
    if acts != QuantActs::Int8 {
        return ws.iter().map(|w| matmul_prepared(pool, simd, dot, acts, &p, w)).collect();
    }
    let avx2 = cfg!(target_arch = "x86_64") && simd == Simd::Avx2;
    let jobs: Vec<Job> = ws.iter().map(|w| int8_job(pool, avx2, dot, &p, w)).collect();
    let ns: Vec<usize> = ws.iter().map(|w| w.rows).collect();
    par_columns_many(pool, x.rows, &ns, |i, outs, dst| jobs[i](outs, dst.get()))
}

/// Output columns of one weight's int8 product into a `[rows, n]` buffer. Its callers (this
/// module's `par_columns` and `par_columns_many` closures) pass `dst` at such a buffer, which
/// outlives the call, and `outs` columns that no other call writes.
type Job<'a> = Box<dyn Fn(Range<usize>, *mut f32) + Send + Sync + 'a>;

/// Checks `w` against `x`; its block type.
fn check(x: &HostTensor, w: &HostMat) -> QuantType {
    let DType::Quant(q) = w.dtype else { panic!("quant matmul: weight dtype {} is not quantized", w.dtype) };
    assert_eq!(x.cols, w.cols, "matmul: x has {} columns, the weight {} inputs", x.cols, w.cols);
    assert_eq!(x.data.len(), x.rows * x.cols, "matmul: x holds {} values for {}x{}", x.data.len(), x.rows, x.cols);
    assert!(w.cols.is_multiple_of(q.block_len()), "matmul: {} inputs are not whole {} blocks", w.cols, q.name());
    let need = w.rows * w.row_bytes();
    assert!(w.data.as_bytes().len() >= need, "matmul: weight holds {} bytes, needs {need}", w.data.as_bytes().len());
    q
}

/// [`matmul`] with `p`'s activations.
fn matmul_prepared(
    pool: &ThreadPool,
    simd: Simd,
    dot: IntDot,
    acts: QuantActs,
    p: &Prepared,
    w: &HostMat,
) -> HostTensor {
    let x = p.x;
    let avx2 = cfg!(target_arch = "x86_64") && simd == Simd::Avx2;
    match acts {
        QuantActs::F32 => {
            let q = check(x, w);
            par_columns(pool, x.rows, w.rows, |outs, dst| {
                // SAFETY: each call writes only columns `outs` of the output; shapes were checked.
                unsafe { run_f32(avx2, q, x, w, outs, dst.get()) }
            })
        }
        QuantActs::Int8 => {
            // `int8_job` checks the shapes.
            let job = int8_job(pool, avx2, dot, p, w);
            par_columns(pool, x.rows, w.rows, |outs, dst| job(outs, dst.get()))
        }
    }
}

/// The integer path of `w`: its activations from `p` (made there once), then a job writing any
/// columns of the `[rows, w.rows]` output.
fn int8_job<'a>(pool: &ThreadPool, avx2: bool, dot: IntDot, p: &'a Prepared, w: &'a HostMat) -> Job<'a> {
    let x = p.x;
    let q = check(x, w);
    let f = spec::format(q);
    if f.k {
        let xq = p.k.get_or_init(|| quantize_rows::<Q8K>(pool, avx2, &x.data, x.cols));
        return int8(dot.pick(true, x.rows), q, x.rows, xq, &[], w);
    }
    let xq = p.b32.get_or_init(|| quantize_rows::<Q8x2>(pool, avx2, &x.data, x.cols));
    let dot = dot.pick(false, x.rows);
    // The VNNI kernels meet signed weight codes with unsigned activations (`x + 128`).
    let signed_vnni = matches!(dot, IntDot::AvxVnni | IntDot::Avx512Vnni) && !f.min;
    let xu: &[[u8; 64]] = if signed_vnni { p.xu.get_or_init(|| Q8x2::offset_codes(xq)) } else { &[] };
    int8(dot, q, x.rows, xq, xu, w)
}

/// The integer path's job: output columns from the quantized activation rows `xq` (and `xu`).
fn int8<'a, A: ActBlock>(
    dot: IntDot,
    q: QuantType,
    rows: usize,
    xq: &'a [A],
    xu: &'a [[u8; 64]],
    w: &'a HostMat,
) -> Job<'a>
where
    Kernels: IntKernel<A>,
{
    let (nb, wb) = (w.cols.div_ceil(A::LEN), w.cols / q.block_len());
    let a = Operands { xq, xu, nb, wb, w: w.data.as_bytes(), row_bytes: w.row_bytes(), n: w.rows };
    Box::new(move |outs, dst| {
        // SAFETY: the caller writes only columns `outs` of a `[rows, w.rows]` output at `dst`;
        // the weight holds `w.rows` rows of `wb` blocks (checked); `dot` was detected.
        unsafe { <Kernels as IntKernel<A>>::run(dot, q, &a, rows, outs, dst) }
    })
}

/// One integer-path call's operands: quantized activations `[rows, nb]` and weight rows.
pub(crate) struct Operands<'a, A> {
    /// Activation blocks, row after row.
    pub xq: &'a [A],
    /// Each activation block's codes plus 128 as unsigned bytes, in its code order, where the
    /// kernel asks for them (signed 32-weight types on VNNI); else empty.
    pub xu: &'a [[u8; 64]],
    /// Activation blocks per row.
    pub nb: usize,
    /// Weight blocks per row.
    pub wb: usize,
    /// Weight bytes, `n` rows of `row_bytes`.
    pub w: &'a [u8],
    /// Bytes per weight row.
    pub row_bytes: usize,
    /// Output features (weight rows).
    pub n: usize,
}

/// An all-zero 32-weight block (of any type): the partner of an odd last block.
pub(crate) const ZERO_BLOCK: [u8; 34] = [0; 34];

/// Dispatch of the integer path by activation block kind.
pub(crate) struct Kernels;

/// The integer kernels for one activation block kind.
pub(crate) trait IntKernel<A> {
    /// Output columns `outs` of every row into `dst` (`[rows, a.n]`).
    ///
    /// # Safety
    /// `dst` holds `rows * a.n` values and no one else writes columns `outs`; `a` is consistent;
    /// the CPU supports `dot`.
    unsafe fn run(dot: IntDot, q: QuantType, a: &Operands<A>, rows: usize, outs: Range<usize>, dst: *mut f32);
}

impl IntKernel<Q8K> for Kernels {
    unsafe fn run(dot: IntDot, q: QuantType, a: &Operands<Q8K>, rows: usize, outs: Range<usize>, dst: *mut f32) {
        #[cfg(target_arch = "x86_64")]
        if dot != IntDot::Portable {
            // SAFETY: forwarded from the caller.
            return unsafe { avx2::run_k(dot, q, a, rows, outs, dst) };
        }
        let f = spec::format(q);
        let block = |row: &[u8], j: usize| spec::unpack(q, &row[j * q.block_bytes()..]);
        // SAFETY: forwarded from the caller.
        unsafe { portable_int(a, rows, outs, dst, f, block, |u, x, acc, _| spec::dot_block_k(f, u, x, acc)) }
    }
}

impl IntKernel<Q8x2> for Kernels {
    unsafe fn run(dot: IntDot, q: QuantType, a: &Operands<Q8x2>, rows: usize, outs: Range<usize>, dst: *mut f32) {
        #[cfg(target_arch = "x86_64")]
        if dot != IntDot::Portable {
            // SAFETY: forwarded from the caller.
            return unsafe { avx2::run_32(dot, q, a, rows, outs, dst) };
        }
        let (f, bb) = (spec::format(q), q.block_bytes());
        let pair = |row: &[u8], j: usize| {
            let b = |i: usize| if i < a.wb { &row[i * bb..(i + 1) * bb] } else { &ZERO_BLOCK[..bb] };
            [spec::unpack(q, b(2 * j)), spec::unpack(q, b(2 * j + 1))]
        };
        let dot = |[ua, ub]: &[spec::IntBlock; 2], x: &Q8x2, acc: &mut [f32; 8], accm: &mut f32| {
            spec::dot_pair_32(f, [ua, ub], x, acc, accm)
        };
        // SAFETY: forwarded from the caller.
        unsafe { portable_int(a, rows, outs, dst, f, pair, dot) }
    }
}

/// The integer path in plain Rust: each weight unit (a block or a pair) unpacked once per output,
/// then met by every row's activation block `j`.
///
/// # Safety
/// As for [`IntKernel::run`].
unsafe fn portable_int<A, U>(
    a: &Operands<A>,
    rows: usize,
    outs: Range<usize>,
    dst: *mut f32,
    f: spec::Format,
    unit: impl Fn(&[u8], usize) -> U,
    dot: impl Fn(&U, &A, &mut [f32; 8], &mut f32),
) {
    let mut acc = vec![([0.0f32; 8], 0.0f32); rows];
    for o in outs {
        acc.fill(([0.0; 8], 0.0));
        let row = &a.w[o * a.row_bytes..(o + 1) * a.row_bytes];
        for j in 0..a.nb {
            let u = unit(row, j);
            for (r, (lanes, accm)) in acc.iter_mut().enumerate() {
                dot(&u, &a.xq[r * a.nb + j], lanes, accm);
            }
        }
        for (r, &(lanes, accm)) in acc.iter().enumerate() {
            // SAFETY: `r * a.n + o` is inside `dst` and in this task's columns.
            unsafe { *dst.add(r * a.n + o) = spec::finish(f, lanes, accm) };
        }
    }
}

/// The f32 path: each output `Portable::dot(x_row, dequantized weight row)`, bit for bit.
///
/// # Safety
/// `dst` holds `x.rows * w.rows` values and no one else writes columns `outs`; `w` holds
/// `w.rows` whole rows; `avx2` only where the CPU has AVX2, FMA and F16C.
unsafe fn run_f32(avx2: bool, q: QuantType, x: &HostTensor, w: &HostMat, outs: Range<usize>, dst: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        let a =
            avx2::F32Args { x: x.data.as_ptr(), w: w.data.as_bytes(), row_bytes: w.row_bytes(), k: w.cols, n: w.rows };
        // SAFETY: forwarded from the caller.
        return unsafe { avx2::run_f32(q, &a, x.rows, outs, dst) };
    }
    let _ = (avx2, q);
    let mut wrow = vec![0.0; w.cols];
    for o in outs {
        w.row_f32(o, &mut wrow);
        for r in 0..x.rows {
            // SAFETY: `r * w.rows + o` is inside `dst` and in this task's columns.
            unsafe { *dst.add(r * w.rows + o) = Portable::dot(x.row(r), &wrow) };
        }
    }
}
