//! `tensorfold run MODEL [PROMPT]`: a chat with a model in this process, as `ollama run` has it:
//! the model loads, the same engine as `serve` starts with the prefix cache on, then one reply
//! to PROMPT (or to stdin when it is not a terminal) or an interactive chat (run_repl.rs).

use crate::chat_template::serve_template;
use crate::device::{OnOwnedBackend, dispatch_owned};
use crate::exit::{Failure, failed, refused};
use crate::load;
use crate::run_args::RunArgs;
use crate::run_chat::{Chat, Ended, Settings};
use std::io::{IsTerminal, Read, Write};
use tf_backend::Backend;
use tf_core::LoadProgress;
use tf_engine::engine::{DraftConfig, DraftKind, EngineConfig, spawn};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;

/// The context `run` gives a model whose own is longer, unless `--max-model-len` says (Ollama's).
const DEFAULT_CONTEXT: usize = 4096;
/// Tokens per KV block.
const BLOCK_SIZE: usize = 16;
/// Tokens of one engine round (one sequence: its prefill chunk).
const ROUND_TOKENS: usize = 512;

/// Runs `run`.
pub fn run(a: &RunArgs) -> Result<(), Failure> {
    let settings = settings(a)?;
    dispatch_owned(&a.dev, "run", Run(a, settings))
}

/// `run`'s body over whichever backend `--device` names.
struct Run<'a>(&'a RunArgs, Settings);

impl OnOwnedBackend for Run<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        let (a, mut settings) = (self.0, self.1);
        let (model, thread) = start(a, new_backend()?)?;
        // gpt-oss answers in harmony messages: read them so unless a parser was named.
        if model.harmony && settings.reasoning.is_none() {
            settings.reasoning = Some((tf_server::reasoning::ReasoningParser::GptOss, a.hide_thinking));
        }
        let mut chat = Chat::new(model, a.system.clone(), settings);
        let result = talk(a, &mut chat);
        chat.engine().shutdown();
        let _ = thread.join();
        result
    }
}

/// One reply to PROMPT or to stdin, else the interactive chat.
fn talk(a: &RunArgs, chat: &mut Chat) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    let prompt = match &a.prompt {
        Some(p) => p.clone(),
        None if stdin.is_terminal() => return crate::run_repl::repl(chat),
        None => {
            let mut text = String::new();
            stdin.lock().read_to_string(&mut text).map_err(|e| failed(format!("reading stdin: {e}")))?;
            text
        }
    };
    if prompt.trim().is_empty() {
        return Err(refused("the prompt is empty"));
    }
    let mut out = std::io::stdout().lock();
    let ended = chat.reply(prompt.trim_end_matches('\n'), &mut out)?;
    writeln!(out).map_err(failed)?;
    match ended {
        Ended::Done => Ok(()),
        Ended::Interrupted => Err(failed("interrupted")),
        Ended::Refused(e) => Err(refused(e)),
    }
}

/// The sampling switches, checked.
fn settings(a: &RunArgs) -> Result<Settings, Failure> {
    let params = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repetition_penalty,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        ..SamplingParams::default()
    };
    params.validate().map_err(|e| {
        refused(format!("--{} {} is out of range: expected {}", e.field.replace('_', "-"), e.value, e.expected))
    })?;
    let reasoning = match a.reasoning_parser.as_deref() {
        Some(name) => Some(tf_server::reasoning::ReasoningParser::named(name).ok_or_else(|| {
            refused(format!("--reasoning-parser {name}: known parsers are qwen3, deepseek_r1 and gpt_oss"))
        })?),
        None => None,
    };
    Ok(Settings { params, seed: a.seed, max_tokens: a.max_tokens, reasoning: reasoning.map(|p| (p, a.hide_thinking)) })
}

/// Loads the model, chooses its chat template and starts the engine.
fn start<B: Backend + 'static>(
    a: &RunArgs,
    backend: B,
) -> Result<(crate::run_chat::Model, std::thread::JoinHandle<()>), Failure> {
    let path = a.model.as_deref().or(a.model_positional.as_deref()).ok_or_else(|| refused("give MODEL"))?;
    load::require_tokenizer(path, false)?;
    let mut model =
        load::open_reporting(path, &backend, &LoadProgress::default(), (&a.dev, Default::default()), |l| {
            eprintln!("{l}")
        })?;
    let ctx = a.max_model_len.unwrap_or(model.decoder.spec.max_position_embeddings.min(DEFAULT_CONTEXT));
    load::cap_context(&mut model, Some(ctx as u64))?;
    let mut info = crate::serve::named_model_info(&model, path.display().to_string());
    let chat = serve_template(a.chat_template.as_deref(), &mut model, &mut info)?;
    for w in &chat.warnings {
        eprintln!("warning: {w}");
    }
    let template = chat.template.ok_or_else(|| refused(format!("{}; give --chat-template NAME|FILE", chat.note)))?;
    let tok = model.tokenizer.clone().ok_or_else(|| refused("the model has no tokenizer"))?;
    let lines = vec![
        format!(
            "model {} ({}, {} layers)",
            path.display(),
            model.decoder.spec.architecture,
            model.decoder.spec.num_layers
        ),
        format!("context {ctx} tokens, device {}", backend.name()),
        chat.note,
    ];
    let eos_ids = model.eos_ids.clone();
    let harmony = model.decoder.spec.architecture == "GptOssForCausalLM";
    let sched = SchedulerConfig {
        max_num_seqs: 1,
        max_round_tokens: ROUND_TOKENS,
        prefill_chunk: ROUND_TOKENS,
        prefix_cache: true,
    };
    let draft = DraftConfig { kind: DraftKind::Off, num_tokens: 1 };
    let cfg =
        EngineConfig { num_blocks: ctx.div_ceil(BLOCK_SIZE) + 1, block_size: BLOCK_SIZE, sched, draft, overlap: true };
    let (engine, thread) = spawn(model, backend, cfg).map_err(refused)?;
    Ok((crate::run_chat::Model { engine, template, tok, eos_ids, info: lines, harmony }, thread))
}
