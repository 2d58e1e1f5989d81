//! The CPU backend's paged KV pools: f32 (the reference's values), bf16 / f16 as llama.cpp's
//! `--cache-type-k f16` keeps them (half the memory and half the bytes a decode round reads;
//! each value rounded to nearest once, when it is written), or ggml's q8_0 / q4_0 blocks as
//! llama.cpp's and Ollama's quantized caches keep them (each row quantized once, when written).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use tf_backend::reference::write_kv;
use tf_backend::{AttnMeta, BackendError, HostKv, HostTensor, KvShape};
use tf_core::{DType, QuantType};
use tf_formats::quantize::quantize_into;

/// One layer's KV pool in the element type the backend was built with.
#[derive(Clone, Debug)]
pub enum CpuKv {
    /// f32 values: the host pool every host backend shares.
    F32(HostKv),
    /// bf16 values.
    Bf16(HalfKv<bf16>),
    /// f16 values.
    F16(HalfKv<f16>),
    /// ggml blocks of 32 values (q8_0 or q4_0).
    Quant(QuantKv),
}

/// A pool of 16-bit values: `[num_blocks, block_size, num_kv_heads, head_dim]` for K and V.
#[derive(Clone, Debug)]
pub struct HalfKv<T> {
    /// The pool's shape.
    pub shape: KvShape,
    /// Keys.
    pub k: Vec<T>,
    /// Values (empty in a latent pool, whose values are its keys).
    pub v: Vec<T>,
}

/// An element a pool stores: f32, or 16 bits widened to f32 where attention reads it.
pub trait KvElem: Copy + Send + Sync + 'static {
    /// Element `i` of `x` as f32.
    fn at(x: &[Self], i: usize) -> f32;
    /// Eight elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// `p` points at eight readable elements; the CPU has AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// `src` as f32 into `dst` (the same length).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// `src` rounded to nearest into `dst` (the same length).
    fn narrow(src: &[f32], dst: &mut [Self]);
    /// Little-endian bytes of `x`.
    fn put(x: &[Self], out: &mut Vec<u8>);
    /// `x` from its little-endian bytes (`size_of::<Self>()` a value).
    fn take(bytes: &[u8], x: &mut [Self]);
}

impl KvElem for f32 {
    #[inline(always)]
    fn at(x: &[f32], i: usize) -> f32 {
        x[i]
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: forwarded from the caller.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    fn widen(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn narrow(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn put(x: &[f32], out: &mut Vec<u8>) {
        out.extend(x.iter().flat_map(|v| v.to_le_bytes()));
    }
    fn take(bytes: &[u8], x: &mut [f32]) {
        for (d, c) in x.iter_mut().zip(bytes.chunks_exact(4)) {
            *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    }
}

impl KvElem for bf16 {
    #[inline(always)]
    fn at(x: &[bf16], i: usize) -> f32 {
        f32::from_bits(u32::from(x[i].to_bits()) << 16)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: forwarded from the caller. Each value's bits moved to the top of its lane.
        unsafe {
            let h = _mm_loadu_si128(p.cast::<__m128i>());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        }
    }
    #[inline(always)]
    fn widen(src: &[bf16], dst: &mut [f32]) {
        // A bf16 is the top half of its f32: a shift the compiler vectorizes in place.
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits(u32::from(s.to_bits()) << 16);
        }
    }
    fn narrow(src: &[f32], dst: &mut [bf16]) {
        dst.convert_from_f32_slice(src);
    }
    fn put(x: &[bf16], out: &mut Vec<u8>) {
        out.extend(x.iter().flat_map(|v| v.to_le_bytes()));
    }
    fn take(bytes: &[u8], x: &mut [bf16]) {
        for (d, c) in x.iter_mut().zip(bytes.chunks_exact(2)) {
            *d = bf16::from_le_bytes([c[0], c[1]]);
        }
    }
}

impl KvElem for f16 {
    #[inline(always)]
    fn at(x: &[f16], i: usize) -> f32 {
        x[i].to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: forwarded from the caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>())) }
    }
    #[inline(always)]
    fn widen(src: &[f16], dst: &mut [f32]) {
        // F16C where the CPU has it (every AVX2 CPU the fast kernels run on), else the exact
        // software conversion: the same values either way.
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has F16C.
            unsafe { widen_f16c(src, dst) };
            return;
        }
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src);
    }
    fn put(x: &[f16], out: &mut Vec<u8>) {
        out.extend(x.iter().flat_map(|v| v.to_le_bytes()));
    }
    fn take(bytes: &[u8], x: &mut [f16]) {
        for (d, c) in x.iter_mut().zip(bytes.chunks_exact(2)) {
            *d = f16::from_le_bytes([c[0], c[1]]);
        }
    }
}

/// [`KvElem::widen`] of f16 values eight at a time by F16C.
///
/// # Safety
/// The CPU supports F16C (and AVX).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` elements of both slices; unaligned loads and stores.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (d, s) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = s.to_f32();
    }
}

/// The pool types the CPU backend keeps, as `--kv-cache-dtype` names them.
pub const KV_DTYPES: [DType; 5] =
    [DType::F32, DType::BF16, DType::F16, DType::Quant(QuantType::Q8_0), DType::Quant(QuantType::Q4_0)];

/// Values in one block of a quantized pool.
const QBLOCK: usize = 32;

/// A pool of ggml blocks (`q`: q8_0 or q4_0), laid out as `[num_blocks, block_size,
/// num_kv_heads, head_dim]` values are, each run of 32 values one block; `head_dim` is a
/// multiple of 32, so no block spans two heads and a head's row is whole blocks.
#[derive(Clone, Debug)]
pub struct QuantKv {
    /// The pool's shape.
    pub shape: KvShape,
    /// The block type.
    pub q: QuantType,
    /// Keys.
    pub k: Vec<u8>,
    /// Values (empty in a latent pool, whose values are its keys).
    pub v: Vec<u8>,
}

impl QuantKv {
    /// A zeroed pool; refused where a head's row is not whole blocks.
    fn new(shape: KvShape, q: QuantType) -> Result<QuantKv, BackendError> {
        if !shape.head_dim.is_multiple_of(QBLOCK) {
            return Err(BackendError::Unsupported(format!(
                "a {} KV cache needs heads of a multiple of {QBLOCK} values; this model has a head of {} \
                 (use --kv-cache-dtype f16 or bf16)",
                q.name(),
                shape.head_dim
            )));
        }
        let n = pool_len(&shape)? / QBLOCK * q.block_bytes();
        let v = if shape.latent { Vec::new() } else { vec![0; n] };
        Ok(QuantKv { shape, q, k: vec![0; n], v })
    }

    /// Bytes of one slot (all KV heads).
    fn slot_bytes(&self) -> usize {
        self.shape.num_kv_heads * self.shape.head_dim / QBLOCK * self.q.block_bytes()
    }

    /// The bytes attention reads as values: V, or in a latent pool K itself.
    pub fn values(&self) -> &[u8] {
        if self.shape.latent { &self.k } else { &self.v }
    }

    /// Writes K/V rows into their slots, each quantized.
    fn write(&mut self, k: &HostTensor, v: &HostTensor, meta: &AttnMeta) {
        let n = self.slot_bytes();
        for (row, &slot) in meta.slot_mapping.iter().enumerate() {
            quantize_into(self.q, k.row(row), &mut self.k[slot * n..(slot + 1) * n]);
            if !self.shape.latent {
                quantize_into(self.q, v.row(row), &mut self.v[slot * n..(slot + 1) * n]);
            }
        }
    }

    /// K then V of `blocks` as their bytes (a latent pool gives K twice), as
    /// [`HostKv::read_blocks`] lays them out.
    fn read_blocks(&self, blocks: &[u32]) -> Vec<u8> {
        let n = self.shape.block_size * self.slot_bytes();
        let mut out = Vec::with_capacity(2 * blocks.len() * n);
        for pool in [&self.k[..], self.values()] {
            for &b in blocks {
                out.extend_from_slice(&pool[b as usize * n..(b as usize + 1) * n]);
            }
        }
        out
    }

    /// Writes bytes laid out as [`QuantKv::read_blocks`] gives them (length checked by the
    /// caller; a latent pool takes the K half and leaves the repeat).
    fn write_blocks(&mut self, blocks: &[u32], bytes: &[u8]) {
        let n = self.shape.block_size * self.slot_bytes();
        if n == 0 {
            return;
        }
        let mut chunks = bytes.chunks_exact(n);
        for pool in [&mut self.k, &mut self.v] {
            if pool.is_empty() {
                continue;
            }
            for (&b, c) in blocks.iter().zip(&mut chunks) {
                pool[b as usize * n..(b as usize + 1) * n].copy_from_slice(c);
            }
        }
    }
}

/// The `dst.len()` values (whole blocks) of a pool of `q` blocks (`bytes`) from value `off` (a
/// block's first), as f32, eight a register where `avx2` (the backend's kernels are AVX2's):
/// each `d * code`, exact in f32, so every path gives the same bits.
pub fn dequantize_at(q: QuantType, bytes: &[u8], off: usize, dst: &mut [f32], avx2: bool) {
    let bb = q.block_bytes();
    let src = &bytes[off / QBLOCK * bb..][..dst.len() / QBLOCK * bb];
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: a backend runs AVX2 kernels only where the CPU has them.
        unsafe { dequantize_avx2(q, src, dst) };
        return;
    }
    let _ = avx2;
    tf_formats::quant::dequantize_into(q, src, dst);
}

/// ggml's dequantization (`tf_formats::quant::dequantize_into`) eight values a register: the codes widened to i32, converted and
/// multiplied by the block's scale (the same exact products).
///
/// # Safety
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dequantize_avx2(q: QuantType, src: &[u8], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let bb = q.block_bytes();
    for (b, out) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(QBLOCK)) {
        let d = _mm256_set1_ps(f16::from_le_bytes([b[0], b[1]]).to_f32());
        let (p, o) = (b.as_ptr().wrapping_add(2), out.as_mut_ptr());
        // SAFETY: a block is 2 + 32 (q8_0) or 2 + 16 (q4_0) bytes and `out` 32 values; unaligned
        // loads and stores.
        unsafe {
            let store =
                |i: usize, codes: __m256i| _mm256_storeu_ps(o.add(8 * i), _mm256_mul_ps(_mm256_cvtepi32_ps(codes), d));
            if q == QuantType::Q8_0 {
                for i in 0..4 {
                    store(i, _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(8 * i).cast::<__m128i>())));
                }
            } else {
                let raw = _mm_loadu_si128(p.cast::<__m128i>());
                let mask = _mm_set1_epi8(0x0F);
                let eight = _mm256_set1_epi32(8);
                let lo = _mm_and_si128(raw, mask);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(raw), mask);
                for (i, half) in [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)].into_iter().enumerate() {
                    store(i, _mm256_sub_epi32(_mm256_cvtepu8_epi32(half), eight));
                }
            }
        }
    }
}

impl<T: KvElem + Default> HalfKv<T> {
    /// A zeroed pool.
    fn new(shape: KvShape) -> Result<HalfKv<T>, BackendError> {
        let n = pool_len(&shape)?;
        let v = if shape.latent { Vec::new() } else { vec![T::default(); n] };
        Ok(HalfKv { shape, k: vec![T::default(); n], v })
    }
}

impl<T: KvElem> HalfKv<T> {
    /// The values attention reads: V, or in a latent pool K itself.
    pub fn values(&self) -> &[T] {
        if self.shape.latent { &self.k } else { &self.v }
    }

    /// Width of one slot (all KV heads).
    pub fn slot_width(&self) -> usize {
        self.shape.num_kv_heads * self.shape.head_dim
    }

    /// Writes K/V rows into their slots (`meta.slot_mapping`), rounded to nearest.
    fn write(&mut self, k: &HostTensor, v: &HostTensor, meta: &AttnMeta) {
        let w = self.slot_width();
        for (row, &slot) in meta.slot_mapping.iter().enumerate() {
            T::narrow(k.row(row), &mut self.k[slot * w..(slot + 1) * w]);
            if !self.shape.latent {
                T::narrow(v.row(row), &mut self.v[slot * w..(slot + 1) * w]);
            }
        }
    }

    /// K then V of `blocks` as little-endian bytes (a latent pool gives K twice), as
    /// [`HostKv::read_blocks`] lays them out.
    fn read_blocks(&self, blocks: &[u32]) -> Vec<u8> {
        let n = self.shape.block_size * self.slot_width();
        let mut out = Vec::with_capacity(2 * blocks.len() * n * 2);
        for pool in [&self.k[..], self.values()] {
            for &b in blocks {
                T::put(&pool[b as usize * n..(b as usize + 1) * n], &mut out);
            }
        }
        out
    }

    /// Writes bytes laid out as [`HalfKv::read_blocks`] gives them (length checked by the
    /// caller; a latent pool takes the K half and leaves the repeat).
    fn write_blocks(&mut self, blocks: &[u32], bytes: &[u8]) {
        let n = self.shape.block_size * self.slot_width();
        let size = std::mem::size_of::<T>();
        if n == 0 {
            return;
        }
        let mut chunks = bytes.chunks_exact(n * size);
        for pool in [&mut self.k, &mut self.v] {
            if pool.is_empty() {
                continue;
            }
            for (&b, c) in blocks.iter().zip(&mut chunks) {
                T::take(c, &mut pool[b as usize * n..(b as usize + 1) * n]);
            }
        }
    }
}

/// Values in a pool of `shape` (K or V), refused where it overflows.
fn pool_len(shape: &KvShape) -> Result<usize, BackendError> {
    shape
        .num_blocks
        .checked_mul(shape.block_size)
        .and_then(|n| n.checked_mul(shape.num_kv_heads * shape.head_dim))
        .ok_or_else(|| BackendError::Unsupported(format!("KV pool {shape:?} is too large")))
}

impl CpuKv {
    /// A zeroed pool of `shape` holding `dtype` (one of [`KV_DTYPES`]).
    pub(crate) fn new(shape: KvShape, dtype: DType) -> Result<CpuKv, BackendError> {
        Ok(match dtype {
            DType::BF16 => CpuKv::Bf16(HalfKv::new(shape)?),
            DType::F16 => CpuKv::F16(HalfKv::new(shape)?),
            DType::Quant(q) => CpuKv::Quant(QuantKv::new(shape, q)?),
            _ => CpuKv::F32(HostKv::new(shape)?),
        })
    }

    /// The pool's shape.
    pub fn shape(&self) -> KvShape {
        match self {
            CpuKv::F32(p) => p.shape,
            CpuKv::Bf16(p) => p.shape,
            CpuKv::F16(p) => p.shape,
            CpuKv::Quant(p) => p.shape,
        }
    }

    /// Writes this round's K/V rows into their slots.
    pub(crate) fn write(&mut self, k: &HostTensor, v: &HostTensor, meta: &AttnMeta) {
        match self {
            CpuKv::F32(p) => write_kv(k, v, p, meta),
            CpuKv::Bf16(p) => p.write(k, v, meta),
            CpuKv::F16(p) => p.write(k, v, meta),
            CpuKv::Quant(p) => p.write(k, v, meta),
        }
    }

    /// K then V of `blocks` as little-endian bytes of the pool's type.
    pub(crate) fn read_blocks(&self, blocks: &[u32]) -> Vec<u8> {
        match self {
            CpuKv::F32(p) => p.read_blocks(blocks),
            CpuKv::Bf16(p) => p.read_blocks(blocks),
            CpuKv::F16(p) => p.read_blocks(blocks),
            CpuKv::Quant(p) => p.read_blocks(blocks),
        }
    }

    /// Writes bytes laid out as [`CpuKv::read_blocks`] gives them.
    pub(crate) fn write_blocks(&mut self, blocks: &[u32], bytes: &[u8]) {
        match self {
            CpuKv::F32(p) => p.write_blocks(blocks, bytes),
            CpuKv::Bf16(p) => p.write_blocks(blocks, bytes),
            CpuKv::F16(p) => p.write_blocks(blocks, bytes),
            CpuKv::Quant(p) => p.write_blocks(blocks, bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::on_host::{decode_kv, encode_kv};

    /// Values across the range, subnormals, ties and the non-finite ones included.
    fn values() -> Vec<f32> {
        let mut v: Vec<f32> = (0..4096).map(|i| (i as f32 * 0.731).sin() * 10f32.powi(i % 13 - 8)).collect();
        v.extend([0.0, -0.0, 1.0 + f32::EPSILON, 65504.0, 65520.0, 1e-8, -6e-8, f32::INFINITY, f32::MIN_POSITIVE]);
        v.extend([f32::from_bits(0x3F80_8000), f32::from_bits(0x3F81_8000), f32::from_bits(0x3F80_1000)]);
        v
    }

    /// The slice conversions round exactly as the host defaults' `encode_kv` / `decode_kv` do,
    /// so a pool written here reads back through the defaults with the same bits.
    #[test]
    fn conversions_round_as_the_host_defaults_do() {
        let x = values();
        let mut b = vec![bf16::ZERO; x.len()];
        bf16::narrow(&x, &mut b);
        let mut h = vec![f16::ZERO; x.len()];
        f16::narrow(&x, &mut h);
        let (mut wb, mut wh) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        bf16::widen(&b, &mut wb);
        f16::widen(&h, &mut wh);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&wb), bits(&decode_kv(&encode_kv(&x, DType::BF16), DType::BF16)));
        assert_eq!(bits(&wh), bits(&decode_kv(&encode_kv(&x, DType::F16), DType::F16)));
        let mut bytes = Vec::new();
        bf16::put(&b, &mut bytes);
        assert_eq!(bytes, encode_kv(&x, DType::BF16));
    }

    #[test]
    fn blocks_round_trip_in_the_pools_type() {
        for dtype in KV_DTYPES {
            for latent in [false, true] {
                // Heads of 3 values, or of one block in a quantized pool.
                let d = if matches!(dtype, DType::Quant(_)) { 32 } else { 3 };
                let shape = KvShape { num_blocks: 4, block_size: 2, num_kv_heads: 2, head_dim: d, latent };
                let mut a = CpuKv::new(shape, dtype).expect("pool");
                let w = 2 * d;
                let rows = HostTensor { data: values()[..8 * w].to_vec(), rows: 8, cols: w };
                let vals = HostTensor { data: values()[1000..1000 + 8 * w].to_vec(), rows: 8, cols: w };
                a.write(&rows, &vals, &AttnMeta::single(0, 8, vec![0, 1, 2, 3], 2));
                let bytes = a.read_blocks(&[2, 0]);
                assert_eq!(bytes.len(), 2 * dtype.kv_bytes(2 * 2 * w), "{dtype} latent {latent}");
                let mut b = CpuKv::new(shape, dtype).expect("pool");
                b.write_blocks(&[1, 3], &bytes);
                assert_eq!(b.read_blocks(&[1, 3]), bytes, "{dtype} latent {latent}");
            }
        }
    }

    /// A quantized pool's rows are ggml's blocks of them: the bytes the host defaults'
    /// `encode_kv` writes, read back (in place or block by block) as `decode_kv` reads them.
    #[test]
    fn a_quantized_pool_holds_ggml_blocks() {
        for q in [QuantType::Q8_0, QuantType::Q4_0] {
            let dtype = DType::Quant(q);
            let shape = KvShape { num_blocks: 2, block_size: 2, num_kv_heads: 2, head_dim: 64, latent: false };
            let mut pool = CpuKv::new(shape, dtype).expect("pool");
            let rows = HostTensor { data: values()[..4 * 128].to_vec(), rows: 4, cols: 128 };
            pool.write(&rows, &rows, &AttnMeta::single(0, 4, vec![0, 1], 2));
            let CpuKv::Quant(p) = &pool else { panic!("a quantized pool") };
            assert_eq!(p.k, encode_kv(&rows.data, dtype), "{q:?}");
            let want = decode_kv(&p.k, dtype);
            let mut got = vec![0.0; 64];
            for off in (0..4 * 128).step_by(64) {
                dequantize_at(q, &p.k, off, &mut got, false);
                assert_eq!(got, want[off..off + 64], "{q:?} at {off}");
            }
            assert_eq!(decode_kv(&encode_kv(&want, dtype), dtype), want, "requantizing keeps the values");
        }
    }

    /// Every code and scale pattern dequantizes to the same bits on the AVX2 path as on the
    /// portable one.
    #[test]
    fn quantized_blocks_dequantize_alike_on_every_path() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            for q in [QuantType::Q8_0, QuantType::Q4_0] {
                let bb = q.block_bytes();
                let mut bytes: Vec<u8> = (0..64 * bb).map(|i| (i * 37 + i / 7) as u8).collect();
                for (n, b) in bytes.chunks_exact_mut(bb).enumerate() {
                    b[..2].copy_from_slice(&f16::from_f32(0.01 * n as f32 - 0.3).to_le_bytes());
                }
                let (mut a, mut p) = (vec![0.0f32; 64 * 32], vec![0.0f32; 64 * 32]);
                // SAFETY: the CPU has AVX2.
                unsafe { dequantize_avx2(q, &bytes, &mut a) };
                tf_formats::quant::dequantize_into(q, &bytes, &mut p);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&p), "{q:?}");
                assert_eq!(p, tf_formats::quant::dequantize(q, &bytes), "{q:?}: ggml's values");
            }
        }
    }

    #[test]
    fn a_quantized_pool_refuses_heads_of_partial_blocks() {
        let shape = KvShape { num_blocks: 2, block_size: 2, num_kv_heads: 4, head_dim: 16, latent: false };
        let e = CpuKv::new(shape, DType::Quant(QuantType::Q8_0)).expect_err("heads of 16");
        assert!(
            e.to_string()
                .contains("a q8_0 KV cache needs heads of a multiple of 32 values; this model has a head of 16")
        );
    }
}
