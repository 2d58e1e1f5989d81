//! Why the CUDA backend could not start or run.

use std::path::PathBuf;
use thiserror::Error;

/// A failure of the CUDA backend, worded for the person who has to fix the machine.
#[derive(Debug, Error)]
pub enum CudaError {
    /// `libcuda` could not be loaded.
    #[error("no CUDA driver found (libcuda.so could not be loaded); install the NVIDIA driver or use --device cpu")]
    NoDriver,
    /// `libnvrtc` could not be loaded.
    #[error("NVRTC not found (libnvrtc.so could not be loaded); install the CUDA toolkit's NVRTC library")]
    NoNvrtc,
    /// The requested GPU does not exist.
    #[error("no CUDA device {ordinal}: this machine has {count}")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices present.
        count: usize,
    },
    /// The GPU is older than the kernels need.
    #[error("CUDA device {ordinal} has compute capability {major}.{minor}; tf-cuda needs 8.0 or newer")]
    OldDevice {
        /// The device.
        ordinal: usize,
        /// Major version.
        major: i32,
        /// Minor version.
        minor: i32,
    },
    /// NVRTC rejected the kernels.
    #[error("NVRTC failed to compile the kernels for {arch}:\n{log}")]
    Compile {
        /// Target architecture.
        arch: String,
        /// The compiler's log.
        log: String,
    },
    /// The CUDA include directory given does not exist.
    #[error("CUDA headers not found at {0} (set CUDA_HOME to the toolkit root)")]
    NoHeaders(PathBuf),
    /// The driver reported an error.
    #[error("CUDA driver error in {what}: {err}")]
    Driver {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        err: cudarc::driver::DriverError,
    },
    /// cuBLAS reported an error.
    #[error("cuBLAS error in {what}: {err}")]
    Blas {
        /// What was being done.
        what: &'static str,
        /// The library's error.
        err: cudarc::cublas::result::CublasError,
    },
}

impl From<CudaError> for tf_backend::BackendError {
    fn from(e: CudaError) -> Self {
        tf_backend::BackendError::Device(e.to_string())
    }
}

/// Attaches `what` to a driver error.
pub(crate) fn drv<T>(r: Result<T, cudarc::driver::DriverError>, what: &'static str) -> Result<T, CudaError> {
    r.map_err(|err| CudaError::Driver { what, err })
}

/// Unwraps a device result inside a `Backend` op, whose signature has no error path: a failed
/// launch or copy there means the device is unusable, so it panics naming the op.
pub(crate) fn must<T>(r: Result<T, cudarc::driver::DriverError>, what: &'static str) -> T {
    match r {
        Ok(v) => v,
        Err(err) => panic!("tf-cuda: {what}: {err}"),
    }
}
