//! Command-line definitions (the names are a contract other tools rely on).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// TensorFold: an exact, fast LLM inference engine.
#[derive(Parser, Debug)]
#[command(name = "tensorfold", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Load and validate a checkpoint; exit 0 when it loads, 2 when refused.
    Check(CheckArgs),
    /// Write the logits at every position of `--ids` to a safetensors file.
    Logits(LogitsArgs),
    /// Generate text from a prompt or ids.
    Generate(GenerateArgs),
    /// Write a random-weight checkpoint with a real model's shapes.
    Synth(SynthArgs),
    /// Measure prefill and decode speed.
    Bench(BenchArgs),
    /// Measure speculative decoding: tokens/s with and without a drafter, acceptance.
    BenchDraft(BenchDraftArgs),
    /// Measure the prefix cache on a multi-turn chat: time to first token with and without it.
    BenchPrefix(BenchPrefixArgs),
    /// Measure a server under load: streamed requests at a concurrency or rate; tok/s, TTFT, TPOT, ITL.
    BenchServe(crate::bench_serve_args::BenchServeArgs),
    /// Measure structured output: compile and per-token mask cost, decode tok/s with a JSON schema on and off.
    BenchStructured(crate::bench_structured::BenchStructuredArgs),
    /// Inspect saved session files.
    Session(SessionArgs),
    /// Serve the OpenAI-compatible HTTP API.
    Serve(tf_server::ServeArgs),
    /// Chat with a model in the terminal (or answer one prompt and exit).
    Run(crate::run_args::RunArgs),
    /// Print a shell completion script.
    Completions(crate::completions::CompletionsArgs),
    /// Download a model from the Hugging Face hub into its cache (verified), print its path.
    Pull(crate::hub_cmd::PullArgs),
    /// List the models in the Hugging Face cache.
    List(crate::hub_cmd::ListArgs),
    /// Remove a model repo from the Hugging Face cache.
    Rm(crate::hub_cmd::RmArgs),
}

/// Where and how to run.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Backend: `cpu` (fast), `ref` (scalar reference), `cuda[:N]` (with the cuda feature), `auto`
    /// (the first GPU when one starts, else the CPU). With `--tensor-parallel-size N`, `cuda`
    /// puts rank r on GPU r, and `cuda:A,B,...` names each rank's GPU.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// CPU threads (default: all cores).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least_one)]
    pub threads: Option<usize>,
    /// Activations of quantized (GGUF) CPU matmuls: `int8` (8-bit blocks as llama.cpp: faster,
    /// logits move slightly) or `f32` (exactly dequantized weights in f32).
    #[arg(long, default_value = "int8", value_parser = ["int8", "f32"])]
    pub quant_acts: String,
    /// Instructions of the CPU's int8 dot products (all give the same bits): `auto` (this CPU's
    /// default), `avx2`, `avx-vnni`, `avx512-vnni`, or `mixed-vnni` (chosen per matmul shape).
    #[arg(long, default_value = "auto", value_parser = tf_server::options::INT_DOTS)]
    pub int_dot: String,
    /// What the KV cache holds: `auto` (f32 on the CPU and `ref`, bf16 on CUDA), or on the CPU
    /// `bf16` / `f16` (half the memory; values rounded once when written) or `q8_0` / `q4_0`
    /// (ggml's blocks: about a quarter / an eighth; heads of a multiple of 32 values).
    #[arg(long, default_value = "auto", value_parser = tf_server::options::KV_CACHE_DTYPES)]
    pub kv_cache_dtype: String,
    /// CUDA developer switches.
    #[command(flatten)]
    pub cuda: crate::device::CudaArgs,
    /// Each tensor-parallel rank's GPU (`tp::rank_device` fills it; empty elsewhere).
    #[arg(skip)]
    pub rank_gpus: Vec<usize>,
}

/// `check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(long)]
    pub model: PathBuf,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// `logits`.
#[derive(Args, Debug)]
pub struct LogitsArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(long)]
    pub model: PathBuf,
    /// Comma-separated token ids.
    #[arg(long, allow_hyphen_values = true)]
    pub ids: String,
    /// Output safetensors file (tensor `logits`, f32, [ids, vocab]).
    #[arg(long)]
    pub out: PathBuf,
    /// Prefill chunk size in tokens (results do not depend on it).
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = at_least_one)]
    pub chunk: usize,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// `generate`.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt text (tokenized with the model's rules, BOS as its tokenizer says).
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    pub prompt: Option<String>,
    /// Prompt as comma-separated token ids, used exactly as given.
    #[arg(long, allow_hyphen_values = true)]
    pub ids: Option<String>,
    /// Tokens to generate at most (at least 1).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true, value_parser = at_least_one)]
    pub max_tokens: usize,
    /// Sampling temperature, 0 to 100; 0 is greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Nucleus sampling mass, above 0 and at most 1.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least_zero::<u32>)]
    pub top_k: u32,
    /// Drop tokens below this fraction of the top probability, 0 to 1.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Repetition penalty, above 0 (1: off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repetition_penalty: f32,
    /// Presence penalty, -2 to 2.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Frequency penalty, -2 to 2.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Random seed (sampling is a pure function of seed and position).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least_zero::<u64>)]
    pub seed: u64,
    /// Stop strings (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Stop token ids, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub stop_ids: Option<String>,
    /// Keep generating past EOS.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object `{prompt_ids, ids, text}` instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Prefill chunk size in tokens (results do not depend on it).
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = at_least_one)]
    pub chunk: usize,
    /// Longest sequence, prompt plus output (default: the model's context).
    #[arg(long, short = 'c', visible_alias = "ctx-size", allow_negative_numbers = true, value_parser = at_least_one)]
    pub max_model_len: Option<usize>,
    /// Saved session `NAME`: restored into the prefix cache first when its file exists, then the
    /// prompt and generated tokens are saved to it (output is the same with or without it).
    #[arg(long)]
    pub session: Option<String>,
    /// Directory of `--session` files (`DIR/NAME.tfsession`).
    #[arg(long, default_value = ".", requires = "session")]
    pub session_dir: PathBuf,
    /// Ranks to shard the model over (tensor parallelism; ranks as threads, each on the CPU or a GPU).
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub tensor_parallel_size: usize,
    /// Split a MoE model's routed experts whole over the ranks (expert parallelism) instead of
    /// every expert's intermediate rows.
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// `session`.
#[derive(Args, Debug)]
pub struct SessionArgs {
    /// What to do with a session file.
    #[command(subcommand)]
    pub command: SessionCommand,
}

/// `session` subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Check a session file and print its header; exit 2 with one line when it is refused.
    Inspect(InspectArgs),
}

/// `session inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The session file.
    pub file: PathBuf,
    /// Also check it against this model, a GGUF file, a checkpoint directory or a hub repo
    /// (fingerprint, KV layout, ids below the rows).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Device options (the KV dtype comes from the backend).
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// `synth`.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Preset: qwen3-0.6b, qwen3-8b, llama3-8b, llama3-70b, qwen3-30b-a3b, glm4.5-air, deepseek-v3, gemma3-270m, qwen3.5-27b,
    /// qwen3-next-80b-a3b, minimax-m2, gpt-oss-20b (MXFP4 experts), tiny.
    #[arg(long)]
    pub like: String,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Weight dtype: bf16, f16, f32, or fp8 (decoder projections in FP8 E4M3 with [128, 128]
    /// block scales, the rest bf16, as Qwen3-FP8).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Seed of the weights.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least_zero::<u64>)]
    pub seed: u64,
    /// Override the number of layers (smaller checkpoints for quick runs).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least_one)]
    pub layers: Option<usize>,
}

/// `bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt lengths to prefill, comma-separated.
    #[arg(long, default_value = "128")]
    pub prompt_len: String,
    /// Tokens to decode after the prompt.
    #[arg(long, default_value_t = 32, allow_negative_numbers = true, value_parser = at_least_one)]
    pub gen_len: usize,
    /// Sequences decoded together per round, comma-separated (each a separate measurement).
    #[arg(long, default_value = "1")]
    pub batch: String,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = at_least_one)]
    pub repeat: usize,
    /// How decode picks tokens, comma-separated (each a separate measurement): greedy (argmax
    /// on the device, the next round queued on it before it reaches the host, as the engine
    /// does), greedy-sync (the same, each round waited for before the next is queued), host
    /// (every row downloaded and sampled), candidates (every row sampled
    /// from the candidates the backend selects), host-logprobs and logprobs (those two with every
    /// row's top-5 logprobs, from the downloaded rows or from the backend), mixed (of every four
    /// rows two greedy, one temperature 0.8 + top-k 50, one 0.8 + top-p 0.95, from candidates).
    #[arg(long, default_value = "greedy")]
    pub sample: String,
    /// Temperature of the sampled modes.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Top-p of the sampled modes.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Top-k of the sampled modes (0: off).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least_zero::<u32>)]
    pub top_k: u32,
    /// Write results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Ranks to shard the model over (tensor parallelism; ranks as threads, each on the CPU or a GPU).
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub tensor_parallel_size: usize,
    /// Split a MoE model's routed experts whole over the ranks (expert parallelism) instead of
    /// every expert's intermediate rows.
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// `bench-draft`.
#[derive(Args, Debug)]
pub struct BenchDraftArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(long)]
    pub model: PathBuf,
    /// Drafter: ngram, mtp (the checkpoint's own MTP head), early-exit:N or model:DIR.
    #[arg(long, default_value = "ngram")]
    pub draft: String,
    /// Most draft tokens per round.
    #[arg(long, default_value_t = 4, allow_negative_numbers = true, value_parser = at_least_one)]
    pub num_draft_tokens: usize,
    /// Tokens to generate per task.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true, value_parser = at_least_one)]
    pub gen_len: usize,
    /// Write results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// `bench-prefix`.
#[derive(Args, Debug)]
pub struct BenchPrefixArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(long)]
    pub model: PathBuf,
    /// Tokens of the system prompt every turn shares.
    #[arg(long, default_value_t = 2000, allow_negative_numbers = true, value_parser = at_least_zero::<usize>)]
    pub system_len: usize,
    /// Turns of the conversation.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true, value_parser = at_least_one)]
    pub turns: usize,
    /// Tokens of each new user message.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true, value_parser = at_least_one)]
    pub turn_len: usize,
    /// Tokens generated per turn (greedy; each answer joins the conversation).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true, value_parser = at_least_one)]
    pub gen_len: usize,
    /// Prefill chunk, and the tokens of one engine round.
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = at_least_one)]
    pub chunk: usize,
    /// Write results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// Parses comma-separated integers (ids as given; range is checked at the boundary).
pub fn parse_ids(s: &str) -> Result<Vec<i64>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<i64>().map_err(|_| format!("'{t}' is not an integer token id")))
        .collect()
}

/// A count flag's value of at least 1 (`--max-tokens 0` and `-1` are refused, as vLLM does).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match integer(s)? {
        n if n < 1 => Err("must be at least 1".to_string()),
        n => usize::try_from(n).map_err(|_| format!("'{s}' is too large")),
    }
}

/// A non-negative integer flag's value (negative numbers reach here and are refused by name).
pub fn at_least_zero<T: TryFrom<i128>>(s: &str) -> Result<T, String> {
    match integer(s)? {
        n if n < 0 => Err("must be 0 or more".to_string()),
        n => T::try_from(n).map_err(|_| format!("'{s}' is too large")),
    }
}

fn integer(s: &str) -> Result<i128, String> {
    s.trim().parse::<i128>().map_err(|_| format!("'{s}' is not an integer"))
}
