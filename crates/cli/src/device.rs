//! Choosing the backend named by `--device` and running a command generically over it.

use crate::args::DeviceArgs;
use crate::exit::{Failure, refused};
use tf_backend::{Backend, RefBackend};
use tf_cpu::CpuBackend;

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

/// Runs `job` on the backend `dev` names.
pub fn dispatch<T: OnBackend>(dev: &DeviceArgs, job: T) -> Result<T::Out, Failure> {
    match dev.device.as_str() {
        "cpu" | "auto" => job.run(&CpuBackend::new(threads(dev)).map_err(refused)?),
        "ref" => job.run(&RefBackend),
        other => Err(refused(format!("--device {other}: expected cpu, ref or auto"))),
    }
}
