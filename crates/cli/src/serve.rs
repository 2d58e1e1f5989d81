//! `tensorfold serve`: binds the port first (a busy one exits 2 at once) and answers there while
//! the model loads (`/health` 503 with the progress), applies the profile, loads the model, sizes the KV cache (`--kv-memory`, or on a GPU `--gpu-memory-utilization` of
//! the memory left after the weights), logs a startup banner on stderr, starts the engine thread
//! and the HTTP server, prints the bound address on stdout, and exits 0 after SIGINT or SIGTERM.

use crate::args::DeviceArgs;
use crate::device::{OnOwnedBackend, dispatch_owned};
use crate::exit::{Failure, failed, refused};
use crate::load;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use tf_backend::Backend;
use tf_core::LoadProgress;
use tf_engine::engine::{DraftConfig, DraftKind, DraftNet, EngineConfig, spawn_with_drafter, state_bytes};
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;
use tf_server::auth::ApiKey;
use tf_server::{Limits, ModelInfo, ServeArgs};

/// The KV cache's size on a device without memory of its own, unless `--kv-memory` says.
const CPU_KV_MEMORY: u64 = 1 << 30;

/// The environment variable that supplies `--api-key` when the switch is not given.
const API_KEY_ENV: &str = "TENSORFOLD_API_KEY";

/// Runs `serve` until a shutdown signal.
pub fn run(args: ServeArgs) -> Result<(), Failure> {
    init_logging();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let mut a = tf_server::options::with_profile(args, &argv).map_err(refused)?;
    if a.api_key.is_none() {
        a.api_key = std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty());
    }
    if a.model.is_none() {
        a.model = a.model_positional.take();
    }
    let listener = bind(&a.host, a.port)?;
    crate::hub_model::resolve_serve(&mut a)?;
    let dir =
        a.model.as_deref().ok_or_else(|| refused("--model is required (on the command line or in the profile)"))?;
    tf_models::locate(dir).map_err(refused)?;
    load::require_tokenizer(dir, a.skip_tokenizer_init)?;
    let progress = Arc::new(LoadProgress::default());
    let server = tf_server::start(listener, crate::conn_limits::conn_limits(&a), progress.clone())
        .map_err(|e| failed(format!("serve on {}:{}: {e}", a.host, a.port)))?;
    tracing::info!("loading; http://{}/health answers 503 until the model is ready", server.local_addr());
    let dev = DeviceArgs {
        device: a.device.clone(),
        threads: a.threads.map(|t| t as usize),
        quant_acts: a.quant_acts.clone(),
        int_dot: a.int_dot.clone(),
        kv_cache_dtype: a.kv_cache_dtype.clone(),
        cuda: Default::default(),
        rank_gpus: Vec::new(),
    };
    let dev = crate::tp::rank_device(&dev, tp_size(&a))?;
    dispatch_owned(&dev.clone(), "serve", Serve { a: &a, server, progress, dev })
}

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` (default `info`).
fn init_logging() {
    let filter = std::env::var("RUST_LOG").ok().and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok());
    let filter = filter.unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Binds the listening socket before anything slow happens; a busy port is refused.
fn bind(host: &str, port: u16) -> Result<TcpListener, Failure> {
    TcpListener::bind((host, port)).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => refused(format!("serve: {host}:{port} is in use")),
        _ => refused(format!("serve: cannot listen on {host}:{port}: {e}")),
    })
}

/// `serve`'s body over whichever backend `--device` names.
struct Serve<'a> {
    a: &'a ServeArgs,
    /// Each rank's device options (`--tensor-parallel-size`).
    dev: DeviceArgs,
    server: tf_server::Starting,
    progress: Arc<LoadProgress>,
}

impl OnOwnedBackend for Serve<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        serve_on(new_backend()?, self)
    }
}

fn serve_on<B: Backend + 'static>(backend: B, job: Serve<'_>) -> Result<(), Failure> {
    let Serve { a, server, progress, dev } = job;
    let dir =
        a.model.as_deref().ok_or_else(|| refused("--model is required (on the command line or in the profile)"))?;
    load::wait_for(a.load_when_exists.as_deref());
    let free_before = backend.memory_info().map(|(free, _)| free);
    let ranks = (&dev, tf_models::tp::GroupShape { size: tp_size(a), expert_parallel: a.enable_expert_parallel });
    let mut model = load::open_reporting(dir, &backend, &progress, ranks, |l| tracing::info!("{l}"))?;
    if a.skip_tokenizer_init {
        model.tokenizer = None;
    }
    load::cap_context(&mut model, a.max_model_len)?;
    let draft_dir = a.draft.strip_prefix("model:").map(Path::new);
    let drafter = match draft_dir {
        Some(d) => Some(DraftNet::open(d, &model, &backend).map_err(refused)?),
        // Loaded before the KV budget is measured, which its weights come out of.
        None if a.draft == "mtp" => Some(DraftNet::Mtp(Box::new(model.load_mtp(&backend).map_err(refused)?))),
        None => None,
    };
    let draft_model = match &drafter {
        Some(DraftNet::Model(d)) => Some(&**d),
        _ => None,
    };
    let free_after = backend.memory_info().map(|(free, _)| free);
    let weight_bytes = match (free_before, free_after) {
        (Some(before), Some(after)) => before.saturating_sub(after),
        _ => checkpoint_bytes(dir) + draft_dir.map_or(0, checkpoint_bytes),
    };
    let block_size = a.block_size as usize;
    let per_token = model.decoder.kv_bytes_per_token(backend.kv_dtype())
        + match &drafter {
            Some(DraftNet::Model(d)) => d.decoder.kv_bytes_per_token(backend.kv_dtype()),
            Some(DraftNet::Mtp(h)) => h.kv_bytes_per_token(backend.kv_dtype()),
            // The assistant reads the target's pools and keeps none.
            Some(DraftNet::Assistant(_)) | None => 0,
        };
    let block_bytes = (per_token * block_size) as u64;
    // Ranks sharing a GPU each allocate their pools out of its free memory.
    let free_share = free_after.map(|f| f / ranks_per_gpu(&dev.rank_gpus));
    let (kv_memory, kv_source) = kv_budget(a.kv_memory, free_share, a.gpu_memory_utilization);
    // Recurrent layers' state slots come out of the same budget, before the blocks.
    let state = state_memory(
        &model,
        draft_model,
        a,
        usize::try_from(a.sched_limits(free_after.is_some()).max_num_seqs).unwrap_or(usize::MAX),
    );
    let state_note = if state > 0 { format!(", state slots {} first", mib(state)) } else { String::new() };
    let kv_memory = kv_memory.saturating_sub(state);
    let num_blocks = usize::try_from(kv_memory / block_bytes.max(1)).unwrap_or(usize::MAX);
    if num_blocks == 0 {
        return Err(refused(format!(
            "{kv_source}: {kv_memory} bytes hold no KV block of {block_bytes} bytes{}",
            if state > 0 { " after the state slots (fewer --max-num-seqs need fewer)" } else { "" }
        )));
    }
    let mut info = model_info(&model, a, dir);
    info.reasoning = a.reasoning_parser.as_deref().map(reasoning_parser).transpose()?;
    let chat = crate::chat_template::serve_template(a.chat_template.as_deref(), &mut model, &mut info)?;
    for warning in &chat.warnings {
        tracing::warn!("{warning}");
    }
    let sched_limits = a.sched_limits(free_after.is_some());
    let size = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    let sched = SchedulerConfig {
        max_num_seqs: size(sched_limits.max_num_seqs),
        max_round_tokens: size(sched_limits.max_round_tokens),
        prefill_chunk: size(sched_limits.prefill_chunk),
        prefix_cache: a.prefix_cache_on(),
    };
    let banner = [
        format!(
            "model {} ({}, {} layers) from {}",
            info.name,
            model.decoder.spec.architecture,
            model.decoder.spec.num_layers,
            dir.display()
        ),
        match model.decoder.tp_size() {
            1 => format!("device {}, weights {}", backend.name(), mib(weight_bytes)),
            n => {
                format!("device {} x {n} tensor-parallel ranks, rank 0's weights {}", backend.name(), mib(weight_bytes))
            }
        },
        format!(
            "kv cache: {num_blocks} blocks of {block_size} tokens ({} tokens of {}, {}; {kv_source}{state_note})",
            num_blocks * block_size,
            backend.kv_dtype(),
            mib(num_blocks as u64 * block_bytes)
        ),
        chat.note,
        format!(
            "scheduling: {} sequences, {} tokens a round, prefill chunks of {} at most",
            sched.max_num_seqs, sched.max_round_tokens, sched.prefill_chunk
        ),
    ];
    let kind = match a.draft.strip_prefix("early-exit:").and_then(|n| n.parse().ok()) {
        Some(n) => DraftKind::EarlyExit(n),
        None if a.draft == "ngram" => DraftKind::Ngram,
        None if a.draft == "mtp" => DraftKind::Mtp,
        None if draft_dir.is_some() => DraftKind::Model,
        None => DraftKind::Off,
    };
    let draft = DraftConfig { kind, num_tokens: a.num_draft_tokens as usize };
    let cfg = EngineConfig { num_blocks, block_size, sched, draft, overlap: a.overlap };
    let (engine, thread) = spawn_with_drafter(model, drafter, backend, cfg).map_err(refused)?;
    let limits = limits(a, engine.max_seq_tokens, sched.max_num_seqs);
    let template = chat.template.map(|t| t.with_fuel(Some(a.chat_template_fuel)));
    let result = server.serve(engine.clone(), info, template, limits, |addr| {
        for line in &banner {
            tracing::info!("{line}");
        }
        tracing::info!("listening on http://{addr}{}", if a.api_key.is_some() { " (API key required)" } else { "" });
        println!("listening on http://{addr}");
    });
    engine.shutdown();
    let _ = thread.join();
    result.map_err(|e| failed(format!("serve on {}:{}: {e}", a.host, a.port)))
}

/// `--tensor-parallel-size`.
/// The most tensor-parallel ranks on one GPU of `gpus` (each rank's), at least 1.
fn ranks_per_gpu(gpus: &[usize]) -> u64 {
    gpus.iter().map(|g| gpus.iter().filter(|h| *h == g).count()).max().unwrap_or(1).max(1) as u64
}

fn tp_size(a: &ServeArgs) -> usize {
    usize::try_from(a.tensor_parallel_size).unwrap_or(usize::MAX)
}

/// Bytes for the KV cache, and what set them: `--kv-memory`, else `share` of the device memory
/// free after the weights, else the CPU default.
fn kv_budget(explicit: Option<u64>, device_free: Option<u64>, share: f64) -> (u64, String) {
    match (explicit, device_free) {
        (Some(bytes), _) => (bytes, "--kv-memory".into()),
        (None, Some(free)) => {
            let bytes = (free as f64 * share) as u64;
            (bytes, format!("--gpu-memory-utilization {share} of {} free after the weights", mib(free)))
        }
        (None, None) => (CPU_KV_MEMORY, "the CPU default; set --kv-memory".into()),
    }
}

/// `n` bytes as MiB (GiB from 10 GiB up), one decimal.
/// Bytes of the state pools the engine will allocate for `model` (and its draft model) with
/// `max_num_seqs` sequences, drafting and the prefix cache as `a` asks (engine/state.rs).
fn state_memory<B: Backend>(model: &Model<B>, draft: Option<&Model<B>>, a: &ServeArgs, max_num_seqs: usize) -> u64 {
    let sched =
        SchedulerConfig { max_num_seqs, max_round_tokens: 1, prefill_chunk: 1, prefix_cache: a.prefix_cache_on() };
    let kind = if a.draft == "off" { DraftKind::Off } else { DraftKind::Ngram };
    let draft_cfg = DraftConfig { kind, num_tokens: 1 };
    let probe = EngineConfig { num_blocks: 0, block_size: 1, sched, draft: draft_cfg, overlap: false };
    state_bytes(model, draft, &probe)
}

fn mib(n: u64) -> String {
    let mib = n as f64 / (1u64 << 20) as f64;
    match mib >= 10240.0 {
        true => format!("{:.1} GiB", mib / 1024.0),
        false => format!("{mib:.1} MiB"),
    }
}

/// The size of a checkpoint's weight files: the GGUF file, or a directory's `.safetensors`.
fn checkpoint_bytes(path: &Path) -> u64 {
    if path.is_file() {
        return path.metadata().map_or(0, |m| m.len());
    }
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn limits(a: &ServeArgs, max_len: usize, max_num_seqs: usize) -> Limits {
    let size = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    Limits {
        max_body_bytes: size(a.max_body_bytes),
        max_prompt_tokens: a.max_prompt_tokens.map_or(max_len, size),
        max_tokens_limit: a.max_tokens_limit.map_or(max_len, size),
        max_n: size(a.max_n),
        max_num_seqs,
        max_queue: size(a.max_queue),
        max_stop_strings: size(a.max_stop_strings),
        max_stop_bytes: size(a.max_stop_bytes),
        prompt_bytes_per_token: size(a.prompt_bytes_per_token),
        max_logprobs: size(a.max_logprobs),
        max_logit_bias: size(a.max_logit_bias),
        session_dir: a.session_dir.clone(),
        conn: crate::conn_limits::conn_limits(a),
        api_key: a.api_key.as_deref().and_then(ApiKey::new),
        allowed_origins: a.allowed_origins.clone(),
    }
}

/// What the HTTP side keeps of the model before it moves into the engine.
fn model_info<B: Backend>(model: &Model<B>, a: &ServeArgs, dir: &Path) -> ModelInfo {
    let name = a.served_model_name.clone().unwrap_or_else(|| {
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        canonical.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
    });
    named_model_info(model, name)
}

/// The `--reasoning-parser` called `name`, or a refusal naming the ones there are.
fn reasoning_parser(name: &str) -> Result<tf_server::reasoning::ReasoningParser, Failure> {
    tf_server::reasoning::ReasoningParser::named(name)
        .ok_or_else(|| refused(format!("--reasoning-parser {name}: known parsers are qwen3, deepseek_r1 and gpt_oss")))
}

/// What the chat side keeps of the model, under `name` (serve's and run's).
pub(crate) fn named_model_info<B: Backend>(model: &Model<B>, name: String) -> ModelInfo {
    let tok = model.tokenizer.as_ref();
    let text_of = |id: Option<u32>| id.and_then(|id| tok.and_then(|t| t.id_to_token(id)));
    ModelInfo {
        name,
        vocab: model.vocab,
        tokenizer: model.tokenizer.clone().map(Arc::new),
        eos_ids: model.eos_ids.clone(),
        bos_token: text_of(model.bos_id),
        eos_token: text_of(tok.and_then(|t| t.eos_id()).or(model.eos_ids.first().copied())),
        chat_template: tok.and_then(|t| t.chat_template()).map(str::to_string),
        reasoning: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_sharing_a_gpu_share_its_memory() {
        assert_eq!(ranks_per_gpu(&[]), 1);
        assert_eq!(ranks_per_gpu(&[0, 1]), 1);
        assert_eq!(ranks_per_gpu(&[0, 0]), 2);
        assert_eq!(ranks_per_gpu(&[2, 0, 2, 2]), 3);
    }

    #[test]
    fn kv_memory_given_wins_else_a_share_of_free_device_memory_else_the_cpu_default() {
        assert_eq!(kv_budget(Some(4 << 20), Some(100 << 30), 0.9).0, 4 << 20);
        let (bytes, source) = kv_budget(None, Some(100 << 30), 0.9);
        assert_eq!(bytes, (100u64 << 30) * 9 / 10);
        assert!(source.contains("0.9 of 100.0 GiB free"), "{source}");
        assert_eq!(kv_budget(None, Some(1 << 30), 0.5).0, 1 << 29);
        assert_eq!(kv_budget(None, None, 0.9).0, CPU_KV_MEMORY);
    }

    #[test]
    fn a_busy_port_is_refused_with_exit_2() {
        let held = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = held.local_addr().unwrap().port();
        let f = bind("127.0.0.1", port).unwrap_err();
        assert_eq!(f.code, 2);
        assert_eq!(f.message, format!("serve: 127.0.0.1:{port} is in use"));
    }
}
