//! `--tensor-parallel-size N`: the model sharded over N ranks as threads of this process
//! (`tf_models::tp`), each with a CPU backend of its own and a share of the threads; rank 0
//! runs the command (the engine, for `serve`). On GPUs the ranks would talk over NCCL, which
//! is not built: a size above 1 needs `--device cpu`.

use crate::args::DeviceArgs;
use crate::exit::{Failure, refused};
use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tf_backend::Backend;
use tf_core::LoadProgress;
use tf_cpu::CpuBackend;
use tf_models::tp::{GroupShape, MakeBackend};
use tf_models::{Model, ModelError};

/// How long a rank waits for the others at a collective before the group is broken.
const COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// The device options of each rank of `size`: `dev` with its threads shared out; a size above 1
/// refused on any device but `cpu`.
pub fn rank_device(dev: &DeviceArgs, size: usize) -> Result<DeviceArgs, Failure> {
    if size <= 1 {
        return Ok(dev.clone());
    }
    if dev.device != "cpu" {
        return Err(refused(format!(
            "--tensor-parallel-size {size} runs its ranks as CPU threads (pass --device cpu); \
             GPU ranks over NCCL are not built yet"
        )));
    }
    let threads = crate::device::threads(dev);
    Ok(DeviceArgs { threads: Some((threads / size).max(1)), ..dev.clone() })
}

/// `path` loaded onto `backend` (rank 0, with `shape.size` ranks: each other rank's CPU backend
/// made from `dev` on its own thread), counting in `progress`.
pub fn open<B: Backend + 'static>(
    path: &Path,
    backend: &B,
    progress: &LoadProgress,
    dev: &DeviceArgs,
    shape: GroupShape,
) -> Result<Model<B>, Failure> {
    let size = shape.size;
    if size <= 1 {
        return Model::open_with_progress(path, backend, progress).map_err(refused);
    }
    let dev = dev.clone();
    let make: MakeBackend<CpuBackend> = Arc::new(move |_| {
        crate::device::cpu(&dev).map_err(|f| ModelError::Backend(tf_backend::BackendError::Device(f.message)))
    });
    // Rank 0's backend is the CPU backend `rank_device` allowed: `B` is `CpuBackend` here.
    let make = (Box::new(make) as Box<dyn Any>)
        .downcast::<MakeBackend<B>>()
        .map_err(|_| refused(format!("--tensor-parallel-size {size} needs --device cpu")))?;
    // The followers end when rank 0's model is dropped (the group closes).
    let (model, _followers) =
        tf_models::tp::open_group(path, backend, progress, shape, *make, COLLECTIVE_TIMEOUT).map_err(refused)?;
    Ok(model)
}

/// Fails with the group's reason once a tensor-parallel group broke (its logits are not to be
/// used: a rank left, hung or refused a plan).
pub fn healthy<B: Backend>(model: &Model<B>) -> Result<(), Failure> {
    match model.decoder.fault() {
        Some(why) => Err(crate::exit::failed(why)),
        None => Ok(()),
    }
}
