//! Shared by the device tests: the backend (or a clean skip), random data, weight views.

#![allow(dead_code)]

pub mod emu;

use std::path::PathBuf;
use tf_core::DType;
use tf_cuda::{CudaBackend, CudaError, CudaOptions};
use tf_formats::{TensorBytes, TensorView};

/// GPU 0, or `None` (with a message) on a machine without a CUDA driver or device.
pub fn backend() -> Option<CudaBackend> {
    backend_opts(CudaOptions::default())
}

/// GPU 0 whose prefill attention stays on the mma.sync kernel on Hopper, or `None` as above.
pub fn backend_mma_sync_attention() -> Option<CudaBackend> {
    backend_opts(CudaOptions { mma_sync_attention: true, ..CudaOptions::default() })
}

/// GPU 0 whose decode rounds always run op by op (no CUDA graph recordings), or `None` as above.
pub fn backend_no_graphs() -> Option<CudaBackend> {
    backend_opts(CudaOptions { no_graphs: true, ..CudaOptions::default() })
}

/// GPU 0 whose FP8 matmuls take the FP8 GEMV up to `rows` rows, or `None` as above.
pub fn backend_fp8_gemv_rows(rows: usize) -> Option<CudaBackend> {
    backend_opts(CudaOptions { fp8_gemv_rows: Some(rows), ..CudaOptions::default() })
}

/// GPU 0 started with `opts` (as `backend_opts`), or `None` as above.
pub fn backend_with(opts: CudaOptions) -> Option<CudaBackend> {
    backend_opts(opts)
}

/// Whether `TF_CUDA_PDL=off` asks for every kernel to start after the one before it ends.
pub fn pdl_off() -> bool {
    std::env::var("TF_CUDA_PDL").is_ok_and(|v| v == "off")
}

/// GPU 0 started with `opts` (a kernel cache under the temporary directory unless
/// `TF_CUDA_CACHE` names one; without programmatic launches where `TF_CUDA_PDL=off`, to tell a
/// race from a wrong kernel; without graph recordings where `TF_CUDA_GRAPHS=off`: recordings
/// share their pool's intermediate buffers, which memcheck reports as stale accesses; each
/// capture's outcome on stderr where `TF_CUDA_GRAPH_LOG=on`), or `None` as above.
fn backend_opts(opts: CudaOptions) -> Option<CudaBackend> {
    if !tf_cuda::driver_present() {
        eprintln!("skipped: no CUDA driver on this machine");
        return None;
    }
    let cache_dir = std::env::var_os("TF_CUDA_CACHE")
        .map(PathBuf::from)
        .or_else(|| Some(std::env::temp_dir().join("tf-cuda-cache")));
    let no_pdl = opts.no_pdl || pdl_off();
    let no_graphs = opts.no_graphs || std::env::var("TF_CUDA_GRAPHS").is_ok_and(|v| v == "off");
    let graph_log = opts.graph_log || std::env::var("TF_CUDA_GRAPH_LOG").is_ok_and(|v| v == "on");
    match CudaBackend::with_options(0, &CudaOptions { cache_dir, no_pdl, no_graphs, graph_log, ..opts }) {
        Ok(b) => Some(b),
        Err(e @ (CudaError::NoDevice { .. } | CudaError::NoDriver)) => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("CUDA backend failed to start: {e}"),
    }
}

/// Deterministic values in [-scale, scale).
pub fn rand(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Rounds to bf16 (nearest even) and back.
pub fn bf16_round(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// A 2-D weight view in `dtype` holding `vals` (rounded to the type).
pub fn weight(name: &str, dtype: DType, rows: usize, cols: usize, vals: &[f32]) -> TensorView {
    let bytes: Vec<u8> = match dtype {
        DType::BF16 => vals.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        DType::F16 => vals.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        _ => vals.iter().flat_map(|&v| v.to_le_bytes()).collect(),
    };
    TensorView {
        name: name.into(),
        dtype,
        shape: vec![rows, cols],
        data: TensorBytes::from_vec(&bytes),
        file: PathBuf::from("test"),
    }
}

/// Largest |a - b|.
pub fn max_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Whether two slices are equal bit for bit.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
