//! The card's two ceilings measured in the same run as a benchmark (docs/perf.md): device-to-device
//! copy bandwidth (bytes read + written) and the bf16 GEMM rate of cuBLAS on random data; and a
//! decode round's weight GEMMs in cuBLAS alone, the reference its round time is held against.

use crate::CudaBackend;
use crate::device::{Arg, grid_for, ptr};
use crate::error::{CudaError, drv};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas};
use cudarc::driver::CudaSlice;

/// Measured ceilings of one GPU.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLimits {
    /// Copy bandwidth in GB/s (1e9 bytes), reads plus writes.
    pub copy_gb_s: f64,
    /// bf16 GEMM rate in TFLOP/s (1e12), an `n x n x n` cuBLAS product.
    pub gemm_tflops: f64,
    /// The GEMM size used.
    pub gemm_n: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `reps` runs of `f` with device events; returns the median milliseconds of `rounds`.
fn time_ms(
    b: &CudaBackend,
    rounds: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let d = &b.ctx.dev;
    f()?;
    let mut times = Vec::new();
    for _ in 0..rounds {
        let start =
            drv(d.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "creating an event")?;
        let end =
            drv(d.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "creating an event")?;
        drv(start.record(&d.stream), "recording an event")?;
        for _ in 0..reps {
            f()?;
        }
        drv(end.record(&d.stream), "recording an event")?;
        drv(end.synchronize(), "waiting for an event")?;
        times.push(drv(start.elapsed_ms(&end), "reading an event")? as f64 / reps as f64);
    }
    Ok(median(times))
}

fn random_bf16(b: &CudaBackend, n: usize, seed: u32) -> CudaSlice<half::bf16> {
    let d = &b.ctx.dev;
    let buf = d.alloc::<half::bf16>(n);
    d.launch(
        &d.k.fill_random_bf16,
        (grid_for(n, 256), 1, 1),
        256,
        0,
        &[Arg::P(ptr(&buf, &d.stream)), Arg::Z(n), Arg::I(seed as i32)],
    );
    buf
}

/// Measures copy bandwidth over `copy_bytes` and the GEMM rate at `gemm_n`.
pub fn measure(b: &CudaBackend, copy_bytes: usize, gemm_n: usize) -> Result<DeviceLimits, CudaError> {
    let d = &b.ctx.dev;
    let src = d.zeros::<u8>(copy_bytes);
    let mut dst = d.zeros::<u8>(copy_bytes);
    let copy_ms = time_ms(b, 5, 10, || drv(d.stream.memcpy_dtod(&src, &mut dst), "copying on the device"))?;
    drop((src, dst));
    let copy_gb_s = 2.0 * copy_bytes as f64 / (copy_ms * 1e-3) / 1e9;

    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { blas::is_culib_present() } {
        return Ok(DeviceLimits { copy_gb_s, gemm_tflops: f64::NAN, gemm_n });
    }
    let blas = CudaBlas::new(d.stream.clone()).map_err(|err| CudaError::Blas { what: "creating a handle", err })?;
    let n = gemm_n;
    let (a, bm) = (random_bf16(b, n * n, 1), random_bf16(b, n * n, 2));
    let mut c = d.zeros::<half::bf16>(n * n);
    let cfg = GemmConfig {
        transa: blas::cublasOperation_t::CUBLAS_OP_T,
        transb: blas::cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: n as i32,
        k: n as i32,
        alpha: half::bf16::ONE,
        lda: n as i32,
        ldb: n as i32,
        beta: half::bf16::ZERO,
        ldc: n as i32,
    };
    let gemm_ms = time_ms(b, 5, 5, || {
        // SAFETY: a, b and c are n x n bf16 buffers, matching cfg.
        unsafe { blas.gemm(cfg, &a, &bm, &mut c) }.map_err(|err| CudaError::Blas { what: "gemm", err })
    })?;
    let gemm_tflops = 2.0 * (n as f64).powi(3) / (gemm_ms * 1e-3) / 1e12;
    Ok(DeviceLimits { copy_gb_s, gemm_tflops, gemm_n })
}

/// Seconds a decode round's weight GEMMs take in cuBLAS alone, at each of `batches` rows: one
/// bf16 GEMM `[rows, k] x [n, k]^T` per weight `(n, k)` of `weights`, every weight a buffer of its
/// own (random data, so each is read from memory as a round reads it), queued back to back on
/// the stream; the median of five rounds. The reference a decode round is held against.
pub fn gemm_round(b: &CudaBackend, weights: &[(usize, usize)], batches: &[usize]) -> Result<Vec<f64>, CudaError> {
    let d = &b.ctx.dev;
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { blas::is_culib_present() } {
        return Ok(vec![f64::NAN; batches.len()]);
    }
    let blas = CudaBlas::new(d.stream.clone()).map_err(|err| CudaError::Blas { what: "creating a handle", err })?;
    let mats: Vec<CudaSlice<half::bf16>> =
        weights.iter().enumerate().map(|(i, &(n, k))| random_bf16(b, n * k, 10 + i as u32)).collect();
    let rows = batches.iter().copied().max().unwrap_or(1);
    let (max_n, max_k) = weights.iter().fold((1, 1), |(a, c), &(n, k)| (a.max(n), c.max(k)));
    let x = random_bf16(b, rows * max_k, 3);
    let mut y = d.zeros::<half::bf16>(rows * max_n);
    let mut out = Vec::with_capacity(batches.len());
    for &m in batches {
        let ms = time_ms(b, 5, 1, || {
            for (w, &(n, k)) in mats.iter().zip(weights) {
                let cfg = GemmConfig {
                    transa: blas::cublasOperation_t::CUBLAS_OP_T,
                    transb: blas::cublasOperation_t::CUBLAS_OP_N,
                    m: n as i32,
                    n: m as i32,
                    k: k as i32,
                    alpha: half::bf16::ONE,
                    lda: k as i32,
                    ldb: k as i32,
                    beta: half::bf16::ZERO,
                    ldc: n as i32,
                };
                // SAFETY: w holds n x k values, x at least m x k and y at least m x n.
                unsafe { blas.gemm(cfg, w, &x, &mut y) }.map_err(|err| CudaError::Blas { what: "gemm", err })?;
            }
            Ok(())
        })?;
        out.push(ms * 1e-3);
    }
    Ok(out)
}
