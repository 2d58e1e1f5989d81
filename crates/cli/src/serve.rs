//! `tensorfold serve`: applies the profile, loads the model, sizes the KV cache from
//! `--kv-memory` (reported on stderr), starts the engine thread and the HTTP server, prints the
//! bound address on stdout, and exits 0 after SIGINT or SIGTERM.

use crate::args::DeviceArgs;
use crate::device::{OnOwnedBackend, dispatch_owned};
use crate::exit::{Failure, failed, refused};
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use tf_backend::Backend;
use tf_engine::engine::{DraftConfig, DraftKind, EngineConfig, spawn_with_drafter};
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;
use tf_server::{Limits, Listen, ModelInfo, ServeArgs};

/// Runs `serve` until a shutdown signal.
pub fn run(args: ServeArgs) -> Result<(), Failure> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let a = tf_server::options::with_profile(args, &argv).map_err(refused)?;
    let dev = DeviceArgs {
        device: a.device.clone(),
        threads: a.threads.map(|t| t as usize),
        quant_acts: a.quant_acts.clone(),
        cuda: Default::default(),
    };
    dispatch_owned(&dev, "serve", Serve(&a))
}

/// `serve`'s body over whichever backend `--device` names.
struct Serve<'a>(&'a ServeArgs);

impl OnOwnedBackend for Serve<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        serve_on(new_backend()?, self.0)
    }
}

fn serve_on<B: Backend + 'static>(backend: B, a: &ServeArgs) -> Result<(), Failure> {
    let dir =
        a.model.as_deref().ok_or_else(|| refused("--model is required (on the command line or in the profile)"))?;
    let mut model = Model::open(dir, &backend).map_err(refused)?;
    let block_size = a.block_size as usize;
    let block_bytes = (model.decoder.kv_bytes_per_token(backend.kv_dtype()) * block_size) as u64;
    let num_blocks = usize::try_from(a.kv_memory / block_bytes.max(1)).unwrap_or(usize::MAX);
    if num_blocks == 0 {
        return Err(refused(format!("--kv-memory {} holds no KV block of {block_bytes} bytes", a.kv_memory)));
    }
    eprintln!(
        "kv cache: {num_blocks} blocks of {block_size} tokens ({} tokens, {:.1} MiB)",
        num_blocks * block_size,
        (num_blocks as u64 * block_bytes) as f64 / (1u64 << 20) as f64
    );
    let mut info = model_info(&model, a, dir);
    let chat = crate::chat_template::serve_template(a.chat_template.as_deref(), &mut model, &mut info)?;
    for warning in &chat.warnings {
        eprintln!("warning: {warning}");
    }
    eprintln!("{}", chat.note);
    let sched = SchedulerConfig {
        max_num_seqs: a.max_num_seqs as usize,
        max_round_tokens: a.max_round_tokens as usize,
        prefill_chunk: a.prefill_chunk as usize,
        prefix_cache: a.prefix_cache_on(),
    };
    let draft_dir = a.draft.strip_prefix("model:").map(Path::new);
    let draft_model = match draft_dir {
        Some(d) => Some(Model::open(d, &backend).map_err(refused)?),
        None => None,
    };
    let kind = match a.draft.strip_prefix("early-exit:").and_then(|n| n.parse().ok()) {
        Some(n) => DraftKind::EarlyExit(n),
        None if a.draft == "ngram" => DraftKind::Ngram,
        None if draft_model.is_some() => DraftKind::Model,
        None => DraftKind::Off,
    };
    let draft = DraftConfig { kind, num_tokens: a.num_draft_tokens as usize };
    let cfg = EngineConfig { num_blocks, block_size, sched, draft, overlap: a.overlap };
    let (engine, thread) = spawn_with_drafter(model, draft_model, backend, cfg).map_err(refused)?;
    let limits = limits(a, engine.max_seq_tokens);
    let listen = Listen { host: a.host.clone(), port: a.port };
    let result = tf_server::run(engine.clone(), info, chat.template, limits, &listen, |addr| {
        println!("listening on http://{addr}");
    });
    engine.shutdown();
    let _ = thread.join();
    result.map_err(|e| failed(format!("serve on {}:{}: {e}", a.host, a.port)))
}

fn limits(a: &ServeArgs, max_len: usize) -> Limits {
    let size = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    Limits {
        max_body_bytes: size(a.max_body_bytes),
        max_prompt_tokens: a.max_prompt_tokens.map_or(max_len, size),
        max_tokens_limit: a.max_tokens_limit.map_or(max_len, size),
        max_n: size(a.max_n),
        max_num_seqs: size(a.max_num_seqs),
        max_queue: size(a.max_queue),
        max_stop_strings: size(a.max_stop_strings),
        max_logprobs: size(a.max_logprobs),
        max_logit_bias: size(a.max_logit_bias),
        session_dir: a.session_dir.clone(),
        conn: crate::conn_limits::conn_limits(a),
    }
}

/// What the HTTP side keeps of the model before it moves into the engine.
fn model_info<B: Backend>(model: &Model<B>, a: &ServeArgs, dir: &Path) -> ModelInfo {
    let name = a.served_model_name.clone().unwrap_or_else(|| {
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        canonical.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
    });
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
    }
}
