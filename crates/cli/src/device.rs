//! Choosing the backend named by `--device` and running a command generically over it.

use crate::args::DeviceArgs;
use crate::exit::{Failure, refused};
use tf_backend::{Backend, RefBackend};
use tf_core::DType;
use tf_cpu::{CpuBackend, CpuOptions, IntDot, QuantActs};

/// Developer switches of the CUDA backend (ignored on other devices).
#[derive(clap::Args, Clone, Debug)]
pub struct CudaArgs {
    /// CUDA graphs for decode rounds: `on` (recorded and replayed), `off` (op by op), `log`
    /// (on, each capture's outcome on stderr).
    #[arg(long, default_value = "on", value_parser = ["on", "off", "log"])]
    pub cuda_graphs: String,
    /// Records a per-warp kernel timeline of rounds FROM:TO (1-based; a trace build of the kernels).
    #[arg(long, value_name = "FROM:TO")]
    pub trace: Option<String>,
    /// Where the kernel timeline goes (default `trace.tsv`).
    #[arg(long, value_name = "FILE", requires = "trace")]
    pub trace_out: Option<std::path::PathBuf>,
    /// The TMA GEMV's mark in a trace build: `X`, `S0` or `SL` (default: the first tile's end).
    #[arg(long, value_name = "MARK", requires = "trace")]
    pub trace_mark: Option<String>,
    /// When the many-row GEMM splits K by segment: `ROWS:FACTOR`, at most ROWS rows and fewer
    /// weight blocks than FACTOR times the SMs (default 64:1; the same bits either way).
    #[arg(long, value_name = "ROWS:FACTOR")]
    pub cuda_split: Option<String>,
    /// Rows from which gate/up's many-row GEMM applies the activation in its store (at least 33;
    /// the same bits either way).
    #[arg(long, value_name = "ROWS")]
    pub cuda_glu_store_rows: Option<usize>,
    /// Most rows a decode round recorded as a CUDA graph has (default 256; larger rounds run op
    /// by op; the same bits either way).
    #[arg(long, value_name = "ROWS")]
    pub cuda_graph_rows: Option<usize>,
    /// Most rows an FP8 matmul reads its FP8 bytes for (the FP8 GEMV, 64 rows a launch; default
    /// 64; 0: every FP8 matmul dequantizes first; the same bits either way).
    #[arg(long, value_name = "ROWS")]
    pub cuda_fp8_gemv_rows: Option<usize>,
    /// How MoE rounds past 64 rows run their experts: `per-expert` (each through the ordinary
    /// matmuls) or `grouped` (one wgmma GEMM a weight kind over every routed expert, on Hopper
    /// with bf16 experts; elsewhere per expert); the same bits.
    #[arg(long, default_value = "grouped", value_parser = ["grouped", "per-expert"])]
    pub cuda_moe_gemm: String,
    /// Where tensor-parallel GPU ranks sum their rows: `device` (copied between the GPUs) or
    /// `host` (downloaded, summed, uploaded); the same bits either way.
    #[arg(long, default_value = "device", value_parser = ["device", "host"])]
    pub cuda_tp_sums: String,
    /// Programmatic launches on sm_90 (a kernel scheduled while the one before it runs): `on`,
    /// or `off` (each kernel after the one before it ends; the same bits, slower: a result that
    /// changes with it is a race).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub cuda_pdl: String,
}

impl Default for CudaArgs {
    /// CUDA graphs on, no trace.
    fn default() -> CudaArgs {
        CudaArgs {
            cuda_graphs: "on".into(),
            trace: None,
            trace_out: None,
            trace_mark: None,
            cuda_split: None,
            cuda_glu_store_rows: None,
            cuda_graph_rows: None,
            cuda_fp8_gemv_rows: None,
            cuda_moe_gemm: "grouped".into(),
            cuda_tp_sums: "device".into(),
            cuda_pdl: "on".into(),
        }
    }
}

/// The backends this build has, as `--version` lists them.
pub fn backends() -> &'static str {
    if cfg!(feature = "cuda") { "cpu, ref, cuda" } else { "cpu, ref" }
}

/// The CUDA driver this machine has, as `--version` says it (`None` in a build without CUDA).
pub fn cuda_driver() -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        Some(match tf_cuda::driver_version() {
            Some((major, minor)) => format!("CUDA {major}.{minor}"),
            None => "no driver".into(),
        })
    }
    #[cfg(not(feature = "cuda"))]
    None
}

/// A command body that runs on any backend.
pub trait OnBackend {
    /// What the command produces.
    type Out;
    /// Runs on `b`.
    fn run<B: Backend + 'static>(self, b: &B) -> Result<Self::Out, Failure>;
}

/// Number of CPU threads to use.
pub fn threads(dev: &DeviceArgs) -> usize {
    dev.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
}

/// The CPU backend `dev` describes (threads, quantized-activation numerics, integer dot products).
pub fn cpu(dev: &DeviceArgs) -> Result<CpuBackend, Failure> {
    let quant_acts = match dev.quant_acts.as_str() {
        "f32" => QuantActs::F32,
        "int8" => QuantActs::Int8,
        other => return Err(refused(format!("--quant-acts {other}: expected int8 or f32"))),
    };
    let base = CpuOptions::new(threads(dev));
    let int_dot = match dev.int_dot.as_str() {
        "auto" => base.int_dot,
        name => IntDot::from_name(name).ok_or_else(|| refused(format!("--int-dot {name}: unknown")))?,
    };
    let kv_dtype = kv_dtype(dev)?.unwrap_or(DType::F32);
    CpuBackend::with_options(CpuOptions { quant_acts, int_dot, kv_dtype, ..base }).map_err(refused)
}

/// The KV pool type `--kv-cache-dtype` names (`None`: `auto`, the backend's own).
fn kv_dtype(dev: &DeviceArgs) -> Result<Option<DType>, Failure> {
    match dev.kv_cache_dtype.as_str() {
        "auto" => Ok(None),
        "f32" => Ok(Some(DType::F32)),
        "bf16" => Ok(Some(DType::BF16)),
        "f16" => Ok(Some(DType::F16)),
        "q8_0" => Ok(Some(DType::Quant(tf_core::QuantType::Q8_0))),
        "q4_0" => Ok(Some(DType::Quant(tf_core::QuantType::Q4_0))),
        other => Err(refused(format!("--kv-cache-dtype {other}: expected auto, f32, bf16, f16, q8_0 or q4_0"))),
    }
}

/// Refuses a `--kv-cache-dtype` other than `auto` and `keeps` on the backend `name`, which
/// keeps only that type.
fn kv_dtype_kept(dev: &DeviceArgs, name: &str, keeps: DType) -> Result<(), Failure> {
    match kv_dtype(dev)? {
        Some(d) if d != keeps => Err(refused(format!(
            "--kv-cache-dtype {}: the {name} backend keeps a {keeps} KV cache (pass --device cpu for {})",
            dev.kv_cache_dtype, dev.kv_cache_dtype
        ))),
        _ => Ok(()),
    }
}

/// The GPU ordinals of `cuda` (GPU 0), `cuda:N`, or `cuda:N,M,...` (one GPU per
/// tensor-parallel rank), or `None` for other devices.
pub fn cuda_ordinals(device: &str) -> Option<Result<Vec<usize>, Failure>> {
    let bad = || refused(format!("--device {device}: expected cuda, cuda:N or cuda:N,M,... (one GPU per rank)"));
    match device {
        "cuda" => Some(Ok(vec![0])),
        d => d.strip_prefix("cuda:").map(|list| list.split(',').map(|n| n.trim().parse().map_err(|_| bad())).collect()),
    }
}

/// The GPU ordinal of `cuda` / `cuda:N` (of a list, the first: rank 0's), or `None` for other
/// devices.
fn cuda_ordinal(device: &str) -> Option<Result<usize, Failure>> {
    cuda_ordinals(device).map(|o| o.map(|o| o[0]))
}

/// `device` unless it lists several GPUs, which only `--tensor-parallel-size` reads.
fn one_device(device: &str) -> Result<(), Failure> {
    match cuda_ordinals(device) {
        Some(Ok(o)) if o.len() > 1 => {
            Err(refused(format!("--device {device} names a GPU per rank: pass --tensor-parallel-size {}", o.len())))
        }
        Some(Err(e)) => Err(e),
        _ => Ok(()),
    }
}

/// Runs `job` on the backend `dev` names (on the CPU backend's own threads, so the parallel ops
/// it starts need no hand-off between threads).
pub fn dispatch<T: OnBackend + Send>(dev: &DeviceArgs, job: T) -> Result<T::Out, Failure>
where
    T::Out: Send,
{
    one_device(&dev.device)?;
    match dev.device.as_str() {
        "auto" => {
            #[cfg(feature = "cuda")]
            if tf_cuda::driver_present()
                && let Ok(b) = cuda::backend(0, &dev.cuda)
            {
                kv_dtype_kept(dev, "CUDA", DType::BF16)?;
                return job.run(&b);
            }
            on_cpu(&cpu(dev)?, job)
        }
        "cpu" => on_cpu(&cpu(dev)?, job),
        "ref" => {
            kv_dtype_kept(dev, "ref", DType::F32)?;
            job.run(&RefBackend)
        }
        other => match cuda_ordinal(other) {
            #[cfg(feature = "cuda")]
            Some(ordinal) => {
                kv_dtype_kept(dev, "CUDA", DType::BF16)?;
                job.run(&cuda::backend(ordinal?, &dev.cuda)?)
            }
            #[cfg(not(feature = "cuda"))]
            Some(_) => {
                Err(refused(format!("--device {other}: this build has no CUDA backend (build with --features cuda)")))
            }
            None => Err(refused(format!("--device {other}: expected cpu, ref, cuda[:N] or auto"))),
        },
    }
}

/// `job` run on `b`'s own threads (`Backend::install`).
fn on_cpu<T: OnBackend + Send>(b: &CpuBackend, job: T) -> Result<T::Out, Failure>
where
    T::Out: Send,
{
    b.install(|| job.run(b))
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
    one_device(&dev.device)?;
    match dev.device.as_str() {
        "auto" => {
            #[cfg(feature = "cuda")]
            if tf_cuda::driver_present() && cuda::backend(0, &dev.cuda).is_ok() {
                kv_dtype_kept(dev, "CUDA", DType::BF16)?;
                return job.run(&|| cuda::backend(0, &dev.cuda));
            }
            job.run(&|| cpu(dev))
        }
        "cpu" => job.run(&|| cpu(dev)),
        "ref" => {
            kv_dtype_kept(dev, "ref", DType::F32)?;
            job.run(&|| Ok(RefBackend))
        }
        other => match cuda_ordinal(other) {
            #[cfg(feature = "cuda")]
            Some(ordinal) => {
                kv_dtype_kept(dev, "CUDA", DType::BF16)?;
                let ordinal = ordinal?;
                job.run(&move || cuda::backend(ordinal, &dev.cuda))
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
        let b = cuda::backend(ordinal?, &dev.cuda)?;
        let l = tf_cuda::limits::measure(&b, 2 << 30, 8192).map_err(crate::exit::failed)?;
        Ok(Some(Limits { copy_gb_s: l.copy_gb_s, gemm_tflops: l.gemm_tflops }))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        Err(refused("this build has no CUDA backend (build with --features cuda)"))
    }
}

/// Seconds the cuBLAS-alone reference round of `weights` takes at each of `batches` rows on the
/// GPU `dev` names (none for CPU devices); see `tf_cuda::limits::gemm_round`.
pub fn cublas_rounds(
    dev: &DeviceArgs,
    weights: &[(usize, usize)],
    batches: &[usize],
) -> Result<Option<Vec<f64>>, Failure> {
    let Some(ordinal) = cuda_ordinal(&dev.device) else { return Ok(None) };
    #[cfg(feature = "cuda")]
    {
        let b = cuda::backend(ordinal?, &dev.cuda)?;
        tf_cuda::limits::gemm_round(&b, weights, batches).map(Some).map_err(crate::exit::failed)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (ordinal, weights, batches);
        Err(refused("this build has no CUDA backend (build with --features cuda)"))
    }
}

#[cfg(feature = "cuda")]
pub mod cuda {
    use super::CudaArgs;
    use crate::exit::{Failure, refused};
    use std::path::PathBuf;
    use tf_cuda::{CudaBackend, CudaOptions};
    use tf_models::ModelError;
    use tf_models::tp::MakeBackend;

    /// The backend options `args` ask for; kernels cached under `$XDG_CACHE_HOME/tensorfold` (or
    /// `~/.cache`); an explicit `CUDA_HOME` must hold `include/`.
    pub fn options(args: &CudaArgs) -> Result<CudaOptions, Failure> {
        let include_dir = std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("include"));
        let cache_dir = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("tensorfold"));
        let trace = args.trace.as_deref().map(str::parse).transpose().map_err(|e| refused(format!("--trace {e}")))?;
        let trace_mark =
            args.trace_mark.as_deref().map(str::parse).transpose().map_err(|e| refused(format!("--trace-mark {e}")))?;
        let gemm_split =
            args.cuda_split.as_deref().map(str::parse).transpose().map_err(|e| refused(format!("--cuda-split {e}")))?;
        Ok(CudaOptions {
            include_dir,
            cache_dir,
            no_graphs: args.cuda_graphs == "off",
            graph_log: args.cuda_graphs == "log",
            trace,
            trace_out: args.trace_out.clone(),
            trace_mark,
            gemm_split,
            glu_store_rows: args.cuda_glu_store_rows,
            graph_rows: args.cuda_graph_rows,
            fp8_gemv_rows: args.cuda_fp8_gemv_rows,
            moe_per_expert: args.cuda_moe_gemm == "per-expert",
            tp_host_sums: args.cuda_tp_sums == "host",
            no_pdl: args.cuda_pdl == "off",
            ..CudaOptions::default()
        })
    }

    /// GPU `ordinal` started with the options `args` ask for.
    pub fn backend(ordinal: usize, args: &CudaArgs) -> Result<CudaBackend, Failure> {
        CudaBackend::with_options(ordinal, &options(args)?).map_err(refused)
    }

    /// Makes tensor-parallel rank `r`'s backend on GPU `gpus[r]`, started with the options
    /// `args` ask for.
    pub fn rank_maker(gpus: Vec<usize>, args: &CudaArgs) -> Result<MakeBackend<CudaBackend>, Failure> {
        let opts = options(args)?;
        let device = |m: String| ModelError::Backend(tf_backend::BackendError::Device(m));
        Ok(std::sync::Arc::new(move |r| {
            let gpu = *gpus.get(r).ok_or_else(|| device(format!("rank {r} has no GPU named")))?;
            CudaBackend::with_options(gpu, &opts).map_err(|e| device(format!("rank {r} on cuda:{gpu}: {e}")))
        }))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn developer_switches_become_typed_options() {
            let args = CudaArgs {
                cuda_graphs: "log".into(),
                trace: Some("3:4".into()),
                trace_out: Some("t.tsv".into()),
                trace_mark: Some("S0".into()),
                cuda_split: Some("256:1".into()),
                cuda_glu_store_rows: Some(65),
                cuda_graph_rows: Some(256),
                cuda_fp8_gemv_rows: Some(0),
                cuda_moe_gemm: "per-expert".into(),
                cuda_tp_sums: "host".into(),
                cuda_pdl: "off".into(),
            };
            let Ok(o) = options(&args) else { panic!("valid switches refused") };
            assert_eq!(o.trace, Some(tf_cuda::TraceRounds { from: 3, to: 4 }));
            assert_eq!((o.no_graphs, o.graph_log, o.trace_mark), (false, true, Some(tf_cuda::TraceMark::S0)));
            assert_eq!(o.trace_out, Some(PathBuf::from("t.tsv")));
            assert_eq!(o.gemm_split, Some(tf_cuda::SplitRule { max_rows: 256, below: 1.0 }));
            assert_eq!(o.graph_rows, Some(256));
            assert_eq!((o.glu_store_rows, o.fp8_gemv_rows, o.tp_host_sums), (Some(65), Some(0), true));
            assert!(o.no_pdl && o.moe_per_expert);
            let off = options(&CudaArgs { cuda_graphs: "off".into(), ..CudaArgs::default() });
            assert!(off.is_ok_and(|o| o.no_graphs && o.trace.is_none() && !o.moe_per_expert));
            assert!(options(&CudaArgs { trace: Some("4:3".into()), ..CudaArgs::default() }).is_err());
            assert!(options(&CudaArgs { trace_mark: Some("Q".into()), ..CudaArgs::default() }).is_err());
        }
    }
}
