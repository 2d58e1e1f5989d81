//! Choosing the backend named by `--device` and running a command generically over it.

use crate::args::DeviceArgs;
use crate::exit::{Failure, refused};
use tf_backend::{Backend, RefBackend};
use tf_cpu::{CpuBackend, CpuOptions, QuantActs};

/// A command body that runs on any backend.
pub trait OnBackend {
    /// What the command produces.
    type Out;
    /// Runs on `b`.
    fn run<B: Backend>(self, b: &B) -> Result<Self::Out, Failure>;
}

/// Number of CPU threads to use.
pub fn threads(dev: &DeviceArgs) -> usize {
    dev.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
}

/// The CPU backend `dev` describes (threads, quantized-activation numerics).
pub fn cpu(dev: &DeviceArgs) -> Result<CpuBackend, Failure> {
    let quant_acts = match dev.quant_acts.as_str() {
        "f32" => QuantActs::F32,
        "int8" => QuantActs::Int8,
        other => return Err(refused(format!("--quant-acts {other}: expected int8 or f32"))),
    };
    CpuBackend::with_options(CpuOptions { quant_acts, ..CpuOptions::new(threads(dev)) }).map_err(refused)
}

/// The GPU ordinal of `cuda` / `cuda:N`, or `None` for other devices.
fn cuda_ordinal(device: &str) -> Option<Result<usize, Failure>> {
    match device {
        "cuda" => Some(Ok(0)),
        d => d.strip_prefix("cuda:").map(|n| n.parse().map_err(|_| refused(format!("--device {d}: expected cuda:N")))),
    }
}

/// Runs `job` on the backend `dev` names.
pub fn dispatch<T: OnBackend>(dev: &DeviceArgs, job: T) -> Result<T::Out, Failure> {
    match dev.device.as_str() {
        "auto" => {
            #[cfg(feature = "cuda")]
            if tf_cuda::driver_present()
                && let Ok(b) = cuda::backend(0)
            {
                return job.run(&b);
            }
            job.run(&cpu(dev)?)
        }
        "cpu" => job.run(&cpu(dev)?),
        "ref" => job.run(&RefBackend),
        other => match cuda_ordinal(other) {
            #[cfg(feature = "cuda")]
            Some(ordinal) => job.run(&cuda::backend(ordinal?)?),
            #[cfg(not(feature = "cuda"))]
            Some(_) => {
                Err(refused(format!("--device {other}: this build has no CUDA backend (build with --features cuda)")))
            }
            None => Err(refused(format!("--device {other}: expected cpu, ref, cuda[:N] or auto"))),
        },
    }
}

/// A command body that owns its backends (each engine thread takes one).
pub trait OnOwnedBackend {
    /// What the command produces.
    type Out;
    /// Runs with `new_backend`, which makes a fresh backend on each call.
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<Self::Out, Failure>;
}

/// Runs `job` (named `what` in errors) on backends of the kind `dev` names (`auto`: the first GPU
/// when one starts, else the CPU).
pub fn dispatch_owned<T: OnOwnedBackend>(dev: &DeviceArgs, what: &str, job: T) -> Result<T::Out, Failure> {
    match dev.device.as_str() {
        "auto" => {
            #[cfg(feature = "cuda")]
            if tf_cuda::driver_present() && cuda::backend(0).is_ok() {
                return job.run(&|| cuda::backend(0));
            }
            job.run(&|| cpu(dev))
        }
        "cpu" => job.run(&|| cpu(dev)),
        "ref" => job.run(&|| Ok(RefBackend)),
        other => match cuda_ordinal(other) {
            #[cfg(feature = "cuda")]
            Some(ordinal) => {
                let ordinal = ordinal?;
                job.run(&move || cuda::backend(ordinal))
            }
            #[cfg(not(feature = "cuda"))]
            Some(_) => Err(refused(format!("--device {other}: {what} needs a build with --features cuda"))),
            None => Err(refused(format!("--device {other}: {what} expects cpu, ref, cuda[:N] or auto"))),
        },
    }
}

/// The measured ceilings of the GPU `dev` names (none for CPU devices).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Device-to-device copy bandwidth, GB/s (reads + writes).
    pub copy_gb_s: f64,
    /// bf16 GEMM rate, TFLOP/s.
    pub gemm_tflops: f64,
}

/// Measures copy bandwidth and the bf16 GEMM peak of the GPU `dev` names, in this run.
pub fn limits(dev: &DeviceArgs) -> Result<Option<Limits>, Failure> {
    let Some(ordinal) = cuda_ordinal(&dev.device) else { return Ok(None) };
    #[cfg(feature = "cuda")]
    {
        let b = cuda::backend(ordinal?)?;
        let l = tf_cuda::limits::measure(&b, 2 << 30, 8192).map_err(crate::exit::failed)?;
        Ok(Some(Limits { copy_gb_s: l.copy_gb_s, gemm_tflops: l.gemm_tflops }))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        Err(refused("this build has no CUDA backend (build with --features cuda)"))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use crate::exit::{Failure, refused};
    use std::path::PathBuf;
    use tf_cuda::{CudaBackend, CudaOptions};

    /// GPU `ordinal`; kernels cached under `$XDG_CACHE_HOME/tensorfold` (or `~/.cache`); an
    /// explicit `CUDA_HOME` must hold `include/`.
    pub fn backend(ordinal: usize) -> Result<CudaBackend, Failure> {
        let include_dir = std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("include"));
        let cache_dir = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("tensorfold"));
        CudaBackend::with_options(ordinal, &CudaOptions { include_dir, cache_dir, ..CudaOptions::default() })
            .map_err(refused)
    }
}
