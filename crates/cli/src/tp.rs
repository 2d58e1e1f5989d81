//! `--tensor-parallel-size N`: the model sharded over N ranks as threads of this process
//! (`tf_models::tp`), each with a backend of its own: a CPU backend with a share of the threads,
//! or a GPU of its own (`--device cuda`: rank r on GPU r; `cuda:A,B,...`: each rank's GPU). Rank 0
//! runs the command (the engine, for `serve`). The collectives go through the host in rank order
//! (`tf_backend::ThreadGroup`), GPU ranks' sums between the devices (tf-cuda's exchange), and
//! GPU ranks decode op by op, without CUDA graphs; NCCL is not built.

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

/// Rank 0's device options of `size` ranks: `dev` with the CPU threads shared out, or on GPUs
/// rank 0's GPU named, every rank's in `rank_gpus`, and CUDA graphs off (a collective reads the
/// device mid-round). A list of GPUs needs one per rank; `ref` and `auto` are refused above 1.
pub fn rank_device(dev: &DeviceArgs, size: usize) -> Result<DeviceArgs, Failure> {
    let gpus = crate::device::cuda_ordinals(&dev.device).transpose()?;
    if size <= 1 {
        return Ok(dev.clone());
    }
    if let Some(gpus) = gpus {
        let gpus = match gpus.len() {
            1 if dev.device == "cuda" => (0..size).collect(),
            n if n == size => gpus,
            n => {
                return Err(refused(format!(
                    "--device {}: {n} GPU(s) named for {size} ranks (name one per rank: cuda:0,1,...; \
                     or pass cuda for GPUs 0..{size})",
                    dev.device
                )));
            }
        };
        let mut cuda = dev.cuda.clone();
        cuda.cuda_graphs = "off".into();
        return Ok(DeviceArgs { device: format!("cuda:{}", gpus[0]), rank_gpus: gpus, cuda, ..dev.clone() });
    }
    if dev.device != "cpu" {
        return Err(refused(format!(
            "--tensor-parallel-size {size} runs its ranks on the CPU or on GPUs: pass --device cpu or cuda"
        )));
    }
    let threads = crate::device::threads(dev);
    Ok(DeviceArgs { threads: Some((threads / size).max(1)), ..dev.clone() })
}

/// `path` loaded onto `backend` (rank 0, with `shape.size` ranks: each other rank's backend made
/// from `dev`, [`rank_device`]'s, on its own thread), counting in `progress`.
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
    let make: Box<dyn Any> = if dev.rank_gpus.is_empty() {
        let dev = dev.clone();
        let make: MakeBackend<CpuBackend> = Arc::new(move |_| {
            crate::device::cpu(&dev).map_err(|f| ModelError::Backend(tf_backend::BackendError::Device(f.message)))
        });
        Box::new(make)
    } else {
        gpu_maker(dev)?
    };
    // Rank 0's backend is of the kind `rank_device` named: `B` is that backend here.
    let make = make
        .downcast::<MakeBackend<B>>()
        .map_err(|_| refused(format!("--tensor-parallel-size {size} needs --device cpu or cuda")))?;
    // The followers end when rank 0's model is dropped (the group closes).
    let (model, _followers) =
        tf_models::tp::open_group(path, backend, progress, shape, *make, COLLECTIVE_TIMEOUT).map_err(refused)?;
    Ok(model)
}

/// The makers of GPU ranks' backends (a `MakeBackend` of the CUDA backend).
fn gpu_maker(dev: &DeviceArgs) -> Result<Box<dyn Any>, Failure> {
    #[cfg(feature = "cuda")]
    {
        Ok(Box::new(crate::device::cuda::rank_maker(dev.rank_gpus.clone(), &dev.cuda)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = dev;
        Err(refused("--device cuda: this build has no CUDA backend (build with --features cuda)"))
    }
}

/// Fails with the group's reason once a tensor-parallel group broke (its logits are not to be
/// used: a rank left, hung or refused a plan).
pub fn healthy<B: Backend>(model: &Model<B>) -> Result<(), Failure> {
    match model.decoder.fault() {
        Some(why) => Err(crate::exit::failed(why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(device: &str) -> DeviceArgs {
        DeviceArgs {
            device: device.into(),
            threads: Some(8),
            quant_acts: "int8".into(),
            int_dot: "auto".into(),
            kv_cache_dtype: "auto".into(),
            cuda: Default::default(),
            rank_gpus: Vec::new(),
        }
    }

    #[test]
    fn ranks_get_their_devices() {
        let cpu = rank_device(&dev("cpu"), 4).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!((cpu.device.as_str(), cpu.threads, cpu.rank_gpus.len()), ("cpu", Some(2), 0));
        let all = rank_device(&dev("cuda"), 2).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!((all.device.as_str(), all.rank_gpus.as_slice()), ("cuda:0", &[0, 1][..]));
        assert_eq!(all.cuda.cuda_graphs, "off", "a collective reads the device mid-round");
        let named = rank_device(&dev("cuda:3, 1"), 2).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!((named.device.as_str(), named.rank_gpus.as_slice()), ("cuda:3", &[3, 1][..]));
        let shared = rank_device(&dev("cuda:0,0"), 2).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(shared.rank_gpus, [0, 0], "ranks may share a GPU");
        let one = rank_device(&dev("cuda:1"), 1).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!((one.device.as_str(), one.cuda.cuda_graphs.as_str()), ("cuda:1", "on"));
    }

    #[test]
    fn mismatched_or_unknown_devices_are_refused() {
        for (device, size, says) in [
            ("cuda:1", 2, "1 GPU(s) named for 2 ranks"),
            ("cuda:0,1,2", 2, "3 GPU(s) named for 2 ranks"),
            ("cuda:0,x", 2, "expected cuda, cuda:N"),
            ("cuda:", 1, "expected cuda, cuda:N"),
            ("ref", 2, "--device cpu or cuda"),
            ("auto", 2, "--device cpu or cuda"),
        ] {
            match rank_device(&dev(device), size) {
                Ok(d) => panic!("{device} at {size}: accepted as {:?}", d.device),
                Err(e) => assert!(e.message.contains(says), "{device} at {size}: {}", e.message),
            }
        }
        // A list passes rank_device at one rank, and the dispatch refuses it.
        let listed = rank_device(&dev("cuda:0,1"), 1).unwrap_or_else(|e| panic!("{}", e.message));
        struct Nothing;
        impl crate::device::OnBackend for Nothing {
            type Out = ();
            fn run<B: Backend + 'static>(self, _: &B) -> Result<(), Failure> {
                Ok(())
            }
        }
        match crate::device::dispatch(&listed, Nothing) {
            Ok(()) => panic!("a GPU list ran at one rank"),
            Err(e) => assert!(e.message.contains("--tensor-parallel-size 2"), "{}", e.message),
        }
    }
}
