//! Test fixtures: deterministic random data, weights in each dtype, backends, error measures.

use crate::{CpuBackend, Simd};
use tf_backend::{HostMat, HostTensor};
use tf_core::DType;
use tf_formats::TensorBytes;

/// Every weight dtype the matmul takes.
pub(crate) const DTYPES: [DType; 3] = [DType::BF16, DType::F16, DType::F32];

/// Splitmix64: small, seeded, good enough for test data.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` uniform values.
    pub(crate) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }

    /// A uniform `[rows, cols]` activation.
    pub(crate) fn tensor(&mut self, rows: usize, cols: usize) -> HostTensor {
        HostTensor { data: self.vec(rows * cols), rows, cols }
    }
}

/// `values` (`rows * cols`) stored as `dtype`.
pub(crate) fn mat(dtype: DType, rows: usize, cols: usize, values: &[f32]) -> HostMat {
    let bytes: Vec<u8> = match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        other => panic!("{other} weights are not float matrices"),
    };
    HostMat { dtype, rows, cols, data: TensorBytes::from_vec(&bytes), scales: None }
}

/// A uniform `[rows, cols]` weight in `dtype`.
pub(crate) fn rand_mat(rng: &mut Rng, dtype: DType, rows: usize, cols: usize) -> HostMat {
    mat(dtype, rows, cols, &rng.vec(rows * cols))
}

/// Rows `start..start + len` of `x`.
pub(crate) fn sub(x: &HostTensor, start: usize, len: usize) -> HostTensor {
    HostTensor { data: x.data[start * x.cols..(start + len) * x.cols].to_vec(), rows: len, cols: x.cols }
}

/// Rows of `parts` stacked.
pub(crate) fn concat(parts: &[&HostTensor]) -> HostTensor {
    let cols = parts[0].cols;
    let data = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
    HostTensor { data, rows: parts.iter().map(|p| p.rows).sum(), cols }
}

/// A backend on `threads` threads with `simd`.
pub(crate) fn cpu(threads: usize, simd: Simd) -> CpuBackend {
    CpuBackend::with_simd(threads, simd).expect("test backend")
}

/// A backend on `threads` threads with `simd` whose KV pools hold `kv_dtype`.
pub(crate) fn cpu_kv(threads: usize, simd: Simd, kv_dtype: DType) -> CpuBackend {
    let int_dot = if simd == Simd::Portable { crate::IntDot::Portable } else { crate::IntDot::detect() };
    let o = crate::CpuOptions { simd, int_dot, kv_dtype, ..crate::CpuOptions::new(threads) };
    CpuBackend::with_options(o).expect("test backend")
}

/// The instruction sets this machine can test.
pub(crate) fn simds() -> Vec<Simd> {
    [Simd::Portable, Simd::Avx2].into_iter().filter(|s| s.available()).collect()
}

/// Largest absolute difference relative to the largest magnitude of `want`.
pub(crate) fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    got.iter().zip(want).fold(0.0f32, |m, (g, w)| m.max((g - w).abs())) / scale
}

/// Bit patterns, for exact comparisons with readable failures.
pub(crate) fn bits(x: &HostTensor) -> Vec<u32> {
    x.data.iter().map(|v| v.to_bits()).collect()
}
