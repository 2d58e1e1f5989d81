//! The `serve` switches (server and engine), their TOML profile (keys are the long flag names;
//! the command line wins), and the options table of `docs/serve.md`, generated from them.

use clap::{Args, CommandFactory, Parser};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// `tensorfold serve`: every switch, with its default and accepted values.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct ServeArgs {
    /// Model to serve: a GGUF file, a Hugging Face checkpoint directory or a hub repo `ORG/NAME`
    /// (also `-m`, or as `serve MODEL`).
    ///
    /// Accepts: a `.gguf` file (told by its magic), a directory holding config.json, or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing). Default: none
    /// (required here or in the profile).
    #[arg(long, short = 'm')]
    pub model: Option<PathBuf>,
    /// Model to serve, as vLLM's `serve MODEL` takes it (the same as `--model`).
    #[arg(value_name = "MODEL", conflicts_with = "model")]
    pub model_positional: Option<PathBuf>,
    /// Use no tokenizer, so a model without one is accepted: only token-id requests are served
    /// (text prompts and chats get 400), as vLLM's switch of that name.
    ///
    /// Accepts: no value (in a profile: true or false). Default: off (a model without a tokenizer
    /// is refused at start).
    #[arg(long)]
    pub skip_tokenizer_init: bool,
    /// Start loading the model only once this file exists (the server answers 503 meanwhile);
    /// for tests that watch the loading state.
    #[arg(long, hide = true, value_name = "FILE")]
    pub load_when_exists: Option<PathBuf>,
    /// Chat template for `/v1/chat/completions` (and `/tokenize` with messages); wins over the
    /// checkpoint's own. Without either, the family's usual built-in is used, with a warning.
    ///
    /// Accepts: a built-in name (chatml, gemma, llama2, llama3, qwen3) or a Jinja file path.
    /// Default: the checkpoint's own template.
    #[arg(long)]
    pub chat_template: Option<String>,
    /// Split a reasoning model's thinking off its chat answers: the message's (or stream
    /// delta's) `reasoning_content` holds it and `content` the answer after it, and tool calls
    /// are parsed from the answer alone. `qwen3`: an answer opening with `<think>` reasons until
    /// `</think>`; `deepseek_r1` (also for templates that open the block in the prompt, such as
    /// Qwen3's thinking-only releases): everything before `</think>` is reasoning, unless the
    /// prompt closed it (thinking off). Structured output then holds on the answer alone.
    /// `gpt_oss`: gpt-oss's harmony messages, the `analysis` channel reasoning and the others
    /// the answer, the markup dropped (structured output refused with it for now).
    ///
    /// Accepts: qwen3, deepseek_r1, gpt_oss. Default: none (the text as generated).
    #[arg(long)]
    pub reasoning_parser: Option<String>,
    /// TOML file of switches (keys are the long flag names); the command line wins over it.
    ///
    /// Accepts: a file path. Default: none.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Address to listen on.
    ///
    /// Accepts: an IP address or host name.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; the bound address is printed on stdout once ready.
    ///
    /// Accepts: 0-65535 (0 picks a free port).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Longest a client may take to send a request head (from connecting, or from the head's
    /// first byte on a kept-alive connection); past it the connection is closed.
    ///
    /// Accepts: seconds (`10`, `0.5`), or a number with `s` or `ms` (`500ms`).
    #[arg(long, default_value = "10s", value_parser = crate::conn::parse_duration)]
    pub header_read_timeout: Duration,
    /// Longest a client may take to send a request body, from the end of its head; past it the
    /// connection is closed (a body still arriving also counts as waiting when the connection
    /// cap is reached).
    ///
    /// Accepts: seconds (`30`, `0.5`), or a number with `s` or `ms` (`500ms`).
    #[arg(long, default_value = "30s", value_parser = crate::conn::parse_duration)]
    pub body_read_timeout: Duration,
    /// Longest a kept-alive connection waits for its next request, and longest a response waits
    /// for its client to read on; past it the connection is closed.
    ///
    /// Accepts: seconds (`60`, `0.5`), or a number with `s` or `ms` (`500ms`).
    #[arg(long, default_value = "60s", value_parser = crate::conn::parse_duration)]
    pub idle_timeout: Duration,
    /// Most connections open at once; past it the connection that has waited longest for a
    /// request or its body is closed to make room (when every one is busy, the new one is).
    ///
    /// Accepts: an integer >= 1, at most three quarters of the open-file limit. Default: three
    /// quarters of the process's open-file limit (`ulimit -n`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,
    /// Model name clients use in requests and see in `/v1/models`.
    ///
    /// Accepts: any string. Default: the model directory's name.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Backend to run on (`cuda` needs a build with `--features cuda`; `auto` picks the GPU when
    /// one starts, else the CPU). With `--tensor-parallel-size N`, `cuda` puts rank r on GPU r
    /// and `cuda:A,B,...` names each rank's GPU.
    ///
    /// Accepts: cpu, ref, cuda, cuda:N, cuda:N,M,... (one GPU per rank), auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// CPU threads of the backend.
    ///
    /// Accepts: an integer >= 1. Default: all cores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub threads: Option<u64>,
    /// Ranks to shard the model over (tensor parallelism): each rank holds its part of every
    /// layer's heads and MLP rows and of the vocabulary, with its own KV cache and state pools
    /// (`--kv-memory` each); rank 0 runs the engine and sends each round's plan to the others. Ranks run as
    /// threads of this process: on the CPU (`--device cpu`, the threads shared out) or each on a
    /// GPU (`--device cuda`), their sums copied between the GPUs and added in rank order, decode
    /// rounds run op by op (no CUDA graphs); NCCL is not built yet.
    /// A saved session holds every rank's part and is restored only at the rank count that saved it.
    ///
    /// Accepts: an integer >= 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub tensor_parallel_size: u64,
    /// With `--tensor-parallel-size` above 1, a MoE model's routed experts are split whole over
    /// the ranks (expert parallelism: each rank runs its experts for every token, the outputs
    /// summed as before) instead of each expert's intermediate rows; shared experts stay split
    /// by rows. Needs at least one routed expert a rank; nothing changes for dense models.
    ///
    /// Accepts: a bare switch.
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// Activations of quantized (GGUF) matmuls on the CPU: `int8` quantizes them to 8-bit blocks
    /// as llama.cpp does (faster; logits move slightly), `f32` multiplies the exactly dequantized
    /// weights in f32 (what the golden test checks).
    ///
    /// Accepts: int8, f32.
    #[arg(long, default_value = "int8", value_parser = ["int8", "f32"])]
    pub quant_acts: String,
    /// Instructions of the CPU's int8 dot products; every choice gives the same bits, only the
    /// speed differs. `mixed-vnni` picks per matmul shape (k-quant prefill on AVX-512 VNNI, the
    /// rest on AVX-VNNI); the choice is named in the banner (`device cpu/avx2+...`).
    ///
    /// Accepts: auto, avx2, avx-vnni, avx512-vnni, mixed-vnni (refused where the CPU lacks it).
    #[arg(long, default_value = "auto", value_parser = INT_DOTS)]
    pub int_dot: String,
    /// What the KV cache holds. On the CPU `auto` is `f32` (the golden values); `bf16` or `f16`
    /// halve its memory, so twice the tokens fit in `--kv-memory`, and the bytes long-context
    /// decode reads (each value rounded to nearest once, when written; every promise holds as
    /// with f32, the logits move within bf16 error; f16 keeps more precision but no magnitude past
    /// 65504, which bf16 keeps). `q8_0` and `q4_0` keep llama.cpp's and Ollama's quantized
    /// caches (ggml's blocks of 32 values with an f16 scale: 34 and 18 bytes a block, so about
    /// 3.8 and 7.1 times the tokens of f32; each row quantized once, when written, so every
    /// promise still holds; the logits move more, q4_0 most); they need heads of a multiple of 32
    /// values and are refused at start on other models. The CUDA backend keeps `bf16`; `ref`
    /// keeps `f32`; other values are refused there. A saved session restores only into a server
    /// of the same type.
    ///
    /// Accepts: auto, f32, bf16, f16, q8_0, q4_0.
    #[arg(long, default_value = "auto", value_parser = KV_CACHE_DTYPES)]
    pub kv_cache_dtype: String,
    /// Memory for the KV cache (the draft model's included); the block count it gives is reported
    /// at start. Given, it wins over `--gpu-memory-utilization`.
    ///
    /// Accepts: bytes, with an optional K, M, G (1000s) or KiB, MiB, GiB (1024s) suffix.
    /// Default: on a GPU, `--gpu-memory-utilization` of the device memory free after the weights
    /// load; on the CPU, 1GiB.
    #[arg(long, value_parser = parse_bytes)]
    pub kv_memory: Option<u64>,
    /// Share of the GPU memory left free after the weights load that the KV cache takes when
    /// `--kv-memory` is not given (vLLM's switch of that name; the rest is headroom for
    /// activations and workspaces). Ignored on the CPU.
    ///
    /// Accepts: a number greater than 0, at most 1.
    #[arg(long, default_value_t = 0.9, value_parser = parse_share)]
    pub gpu_memory_utilization: f64,
    /// Tokens per KV block.
    ///
    /// Accepts: 1-1024.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub block_size: u64,
    /// Sequences the engine runs at once.
    ///
    /// Accepts: an integer >= 1. Default: 256 on a GPU, 64 on the CPU.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_num_seqs: Option<u64>,
    /// Tokens one engine round advances at most (all sequences together): decoding sequences
    /// take one each (plus drafts), prefill chunks fill the rest.
    ///
    /// Accepts: an integer >= 1. Default: 8192 on a GPU, 512 on the CPU.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_round_tokens: Option<u64>,
    /// Largest prefill chunk of one sequence in one round (results do not depend on it).
    ///
    /// Accepts: an integer >= 1. Default: 2048 on a GPU, 256 on the CPU.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub prefill_chunk: Option<u64>,
    /// Reuse cached KV blocks of earlier prompts with the same prefix.
    ///
    /// Accepts: true, false.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, overrides_with = "no_prefix_cache")]
    pub prefix_cache: bool,
    /// Turn the prefix cache off (the same as `--prefix-cache false`; the later switch wins).
    ///
    /// Accepts: no value (in a profile: true or false). Default: off (the cache is on).
    #[arg(long, overrides_with = "prefix_cache")]
    pub no_prefix_cache: bool,
    /// Speculative decoding drafter; output is identical with or without it (a request opts out
    /// with `"draft": false`).
    ///
    /// Accepts: off, ngram (prompt lookup), mtp (the checkpoint's own multi-token-prediction
    /// layer: DeepSeek V3, GLM-4.5 / 4.6, GLM-5, DeepSeek V3.2, Qwen3.5, Qwen3-Next, Step 3.5 / 3.7;
    /// GLM-4.5 / 4.6, GLM-5, Qwen3.5, Qwen3-Next and Step 3.5 also from GGUF), early-exit:N (the model's
    /// first N layers + head), model:DIR (a smaller checkpoint with the same vocabulary, or a Gemma 4
    /// assistant, `gemma4_assistant`, for a Gemma 4 model).
    #[arg(long, default_value = "off", value_parser = parse_draft)]
    pub draft: String,
    /// Most draft tokens verified per round (adapted per sequence between 1 and this).
    ///
    /// Accepts: an integer from 1 to 16.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub num_draft_tokens: u64,
    /// Queue a round of decoding before the tokens of the round before it are reported (greedy:
    /// before its ids reach the host; sampled without logprobs or a grammar: before they are
    /// reported and the next schedule), so the GPU does not wait for the host between rounds
    /// (vLLM's async scheduling); the tokens are the same either way.
    ///
    /// Accepts: true, false.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub overlap: bool,
    /// Longest sequence (prompt plus output) a request may make; longer ones get 400 (vLLM's
    /// `--max-model-len`, llama.cpp's `-c` / `--ctx-size`).
    ///
    /// Accepts: an integer >= 1, at most the model's context. Default: the model's context (and
    /// what the KV cache holds).
    #[arg(long, short = 'c', visible_alias = "ctx-size", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_model_len: Option<u64>,
    /// Largest request body; larger ones get 413.
    ///
    /// Accepts: bytes, with an optional K, M, G (1000s) or KiB, MiB, GiB (1024s) suffix.
    #[arg(long, default_value = "4MiB", value_parser = parse_bytes)]
    pub max_body_bytes: u64,
    /// Longest prompt in tokens.
    ///
    /// Accepts: an integer >= 1. Default: the model's context (and what the KV cache holds).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_prompt_tokens: Option<u64>,
    /// Largest `max_tokens` (`max_completion_tokens`) a request may ask for.
    ///
    /// Accepts: an integer >= 1. Default: the model's context.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens_limit: Option<u64>,
    /// Most sequences one request may start: `n` times the number of prompts.
    ///
    /// Accepts: an integer >= 1.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_n: u64,
    /// Sequences that may wait beyond `--max-num-seqs` running ones; past that, 429.
    ///
    /// Accepts: an integer >= 0.
    #[arg(long, default_value_t = 256)]
    pub max_queue: u64,
    /// Most entries of `stop`, and of `stop_token_ids`, per request.
    ///
    /// Accepts: an integer >= 0.
    #[arg(long, default_value_t = 16)]
    pub max_stop_strings: u64,
    /// Most bytes of all `stop` strings of a request together (each string is bounded by it).
    ///
    /// Accepts: bytes, with an optional K, M, G (1000s) or KiB, MiB, GiB (1024s) suffix.
    #[arg(long, default_value = "4KiB", value_parser = parse_bytes)]
    pub max_stop_bytes: u64,
    /// Bytes of text a prompt may have per token it may hold (`--max-prompt-tokens`, less than
    /// the context): a longer text prompt (or rendered chat) is refused before it is tokenized.
    ///
    /// Accepts: an integer >= 1.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub prompt_bytes_per_token: u64,
    /// Work budget of one chat-template render (minijinja fuel: about one per instruction and
    /// per 64 bytes of data made); a render past it is refused with 400.
    ///
    /// Accepts: an integer >= 1.
    #[arg(long, default_value_t = crate::template::DEFAULT_FUEL, value_parser = clap::value_parser!(u64).range(1..))]
    pub chat_template_fuel: u64,
    /// Largest `logprobs` (completions) or `top_logprobs` (chat).
    ///
    /// Accepts: an integer >= 0.
    #[arg(long, default_value_t = 20)]
    pub max_logprobs: u64,
    /// Most `logit_bias` entries per request.
    ///
    /// Accepts: an integer >= 0.
    #[arg(long, default_value_t = 1024)]
    pub max_logit_bias: u64,
    /// Directory of saved sessions (`POST /v1/sessions/{name}` and `.../restore`); names are
    /// confined to it.
    ///
    /// Accepts: a directory path. Default: sessions are off.
    #[arg(long)]
    pub session_dir: Option<PathBuf>,
    /// Key every route but `/health` needs, as `Authorization: Bearer KEY`; others get 401.
    ///
    /// Accepts: a non-empty string. Default: the environment variable `TENSORFOLD_API_KEY`, else
    /// no key is asked for.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub api_key: Option<String>,
    /// Origins whose browser pages may call the API (CORS): their responses carry
    /// `Access-Control-Allow-Origin` and their preflights are answered.
    ///
    /// Accepts: `*`, or a comma-separated list of `http(s)://host[:port]`. Default: none (no
    /// CORS headers are sent).
    #[arg(long, value_parser = crate::cors::parse_origins)]
    pub allowed_origins: Option<crate::cors::Origins>,
}

/// The scheduling limits in force: the switches given, else the device's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedLimits {
    /// `--max-num-seqs`.
    pub max_num_seqs: u64,
    /// `--max-round-tokens`.
    pub max_round_tokens: u64,
    /// `--prefill-chunk`.
    pub prefill_chunk: u64,
}

/// Defaults on a GPU: vLLM's for a large card (256 sequences, 8192 tokens a round), so prefill
/// runs in large chunks beside up to 256 decoding streams.
pub const GPU_SCHED: SchedLimits = SchedLimits { max_num_seqs: 256, max_round_tokens: 8192, prefill_chunk: 2048 };
/// Defaults on the CPU, where a round of many tokens would stall every stream for long.
pub const CPU_SCHED: SchedLimits = SchedLimits { max_num_seqs: 64, max_round_tokens: 512, prefill_chunk: 256 };

impl ServeArgs {
    /// The scheduling limits: the switches given, else `GPU_SCHED` (`gpu`) or `CPU_SCHED`.
    pub fn sched_limits(&self, gpu: bool) -> SchedLimits {
        let d = if gpu { GPU_SCHED } else { CPU_SCHED };
        SchedLimits {
            max_num_seqs: self.max_num_seqs.unwrap_or(d.max_num_seqs),
            max_round_tokens: self.max_round_tokens.unwrap_or(d.max_round_tokens),
            prefill_chunk: self.prefill_chunk.unwrap_or(d.prefill_chunk),
        }
    }

    /// Whether the prefix cache is on: `--prefix-cache true` and no later `--no-prefix-cache`.
    pub fn prefix_cache_on(&self) -> bool {
        self.prefix_cache && !self.no_prefix_cache
    }
}

/// A parser over [`ServeArgs`] alone, where a later occurrence of a switch wins.
#[derive(Parser, Debug)]
#[command(name = "serve", args_override_self = true)]
struct ServeOnly {
    #[command(flatten)]
    args: ServeArgs,
}

/// Parses a byte count: digits with an optional K/M/G (x1000) or KiB/MiB/GiB (x1024) suffix.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("'{s}' is not a byte count such as 4096 or 2GiB"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "m" | "mb" => 1000 * 1000,
        "g" | "gb" => 1000 * 1000 * 1000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(format!("'{s}': unknown unit (use K, M, G, KiB, MiB or GiB)")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("'{s}' is too large"))
}

/// Parses a share of memory: a number in (0, 1].
fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1.0 => Ok(x),
        _ => Err(format!("'{s}': expected a number greater than 0 and at most 1")),
    }
}

/// Applies `args.profile` (if any): its keys become switches placed before the command line's,
/// so the command line wins. `argv` is the process's full argument list.
pub fn with_profile(args: ServeArgs, argv: &[OsString]) -> Result<ServeArgs, String> {
    let Some(path) = &args.profile else { return Ok(args) };
    let bytes = tf_core::regular_file::read_regular(path).map_err(|e| format!("--profile {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("--profile {}: not UTF-8 text", path.display()))?;
    let mut merged: Vec<OsString> = vec!["serve".into()];
    merged.extend(profile_switches(&text).map_err(|e| format!("--profile {}: {e}", path.display()))?);
    let after = argv.iter().position(|a| a == "serve").map_or(argv.len(), |i| i + 1);
    merged.extend(argv[after..].iter().cloned());
    ServeOnly::try_parse_from(merged).map(|p| p.args).map_err(|e| e.to_string())
}

/// Turns a TOML profile into `--key=value` switches, refusing keys that are not long flags.
pub fn profile_switches(text: &str) -> Result<Vec<OsString>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let cmd = ServeOnly::command();
    let mut out = Vec::new();
    for (key, value) in table {
        let flag = key.replace('_', "-");
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(flag.as_str())) else {
            return Err(format!("'{key}' is not a serve switch"));
        };
        if flag == "profile" {
            return Err(format!("'{key}' is not a serve switch"));
        }
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            match value {
                toml::Value::Boolean(true) => out.push(format!("--{flag}").into()),
                toml::Value::Boolean(false) => {}
                _ => return Err(format!("'{key}': expected true or false")),
            }
            continue;
        }
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => return Err(format!("'{key}': expected a string, number or boolean")),
        };
        out.push(format!("--{flag}={value}").into());
    }
    Ok(out)
}

/// The options table of `docs/serve.md` (Markdown), generated from the switch definitions.
pub fn options_table() -> String {
    let cmd = ServeOnly::command();
    let mut out = String::from("| Switch | Accepts | Default | Meaning |\n|---|---|---|---|\n");
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" || arg.is_hide_set() {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let long_help = arg.get_long_help().map(|h| h.to_string()).unwrap_or_default();
        let accepts = field_of(&long_help, "Accepts:").unwrap_or_default();
        let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let default = match defaults.is_empty() {
            true => field_of(&long_help, "Default:").unwrap_or_else(|| "none".into()),
            false => format!("`{}`", defaults.join(",")),
        };
        out.push_str(&format!("| `--{long}` | {accepts} | {default} | {help} |\n"));
    }
    out
}

/// The text after `label` up to the next label or the end, trimmed of a final period.
fn field_of(long_help: &str, label: &str) -> Option<String> {
    let start = long_help.find(label)? + label.len();
    let rest = &long_help[start..];
    let end = ["Accepts:", "Default:"].iter().filter_map(|l| rest.find(l)).min().unwrap_or(rest.len());
    Some(rest[..end].trim().trim_end_matches('.').to_string())
}

/// Checks a `--draft` value: `off`, `ngram`, `mtp`, `early-exit:N` with N >= 1, or `model:PATH`.
fn parse_draft(s: &str) -> Result<String, String> {
    let ok = matches!(s, "off" | "ngram" | "mtp")
        || s.strip_prefix("model:").is_some_and(|p| !p.is_empty())
        || s.strip_prefix("early-exit:").and_then(|n| n.parse::<usize>().ok()).is_some_and(|n| n >= 1);
    if ok { Ok(s.to_string()) } else { Err(format!("'{s}': expected off, ngram, mtp, early-exit:N or model:DIR")) }
}

/// The values of `--int-dot` (every command's and `serve`'s).
pub const INT_DOTS: [&str; 5] = ["auto", "avx2", "avx-vnni", "avx512-vnni", "mixed-vnni"];

/// The values of `--kv-cache-dtype` (every command's and `serve`'s).
pub const KV_CACHE_DTYPES: [&str; 6] = ["auto", "f32", "bf16", "f16", "q8_0", "q4_0"];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> ServeArgs {
        ServeOnly::try_parse_from(argv).map(|p| p.args).unwrap()
    }

    #[test]
    fn byte_counts_parse_with_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("3 MiB"), Ok(3 << 20));
        assert_eq!(parse_bytes("5k"), Ok(5000));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("12XB").is_err());
        assert!(parse_bytes("99999999999999GiB").is_err());
    }

    #[test]
    fn profile_sets_switches_and_the_command_line_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        let text = "model = \"/m\"\nport = 9000\nmax-num-seqs = 3\nkv_memory = \"2MiB\"\nprefix-cache = false\n";
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap();
        let argv: Vec<OsString> =
            ["tensorfold", "serve", "--profile", p, "--port", "0"].iter().map(OsString::from).collect();
        let args = with_profile(parse(&["serve", "--profile", p, "--port", "0"]), &argv).unwrap();
        assert_eq!(args.model, Some(PathBuf::from("/m")));
        assert_eq!(args.port, 0, "command line wins");
        assert_eq!(args.max_num_seqs, Some(3));
        assert_eq!(args.kv_memory, Some(2 << 20));
        assert!(!args.prefix_cache);
    }

    #[test]
    fn gpu_memory_utilization_is_a_share_and_the_kv_memory_default_is_left_to_the_device() {
        let a = parse(&["serve"]);
        assert_eq!((a.kv_memory, a.gpu_memory_utilization, a.device.as_str()), (None, 0.9, "auto"));
        assert_eq!(parse(&["serve", "--gpu-memory-utilization", "0.5"]).gpu_memory_utilization, 0.5);
        assert_eq!(parse(&["serve", "--gpu-memory-utilization", "1"]).gpu_memory_utilization, 1.0);
        for bad in ["0", "1.01", "-0.5", "nan", "x"] {
            let r = ServeOnly::try_parse_from(["serve", "--gpu-memory-utilization", bad]);
            assert!(r.is_err(), "--gpu-memory-utilization {bad} was accepted");
        }
    }

    #[test]
    fn api_key_comes_from_the_profile_and_is_never_empty() {
        assert!(ServeOnly::try_parse_from(["serve", "--api-key", ""]).is_err());
        assert_eq!(profile_switches("api-key = \"k1\""), Ok(vec![OsString::from("--api-key=k1")]));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, "api_key = \"secret\"\n").unwrap();
        let p = path.to_str().unwrap();
        let argv: Vec<OsString> = ["tensorfold", "serve", "--profile", p].iter().map(OsString::from).collect();
        let args = with_profile(parse(&["serve", "--profile", p]), &argv).unwrap();
        assert_eq!(args.api_key.as_deref(), Some("secret"));
    }

    #[test]
    fn no_prefix_cache_turns_the_cache_off_and_the_later_switch_wins() {
        assert!(parse(&["serve"]).prefix_cache_on());
        assert!(!parse(&["serve", "--no-prefix-cache"]).prefix_cache_on());
        assert!(!parse(&["serve", "--prefix-cache", "false"]).prefix_cache_on());
        assert!(!parse(&["serve", "--prefix-cache", "true", "--no-prefix-cache"]).prefix_cache_on());
        assert!(parse(&["serve", "--no-prefix-cache", "--prefix-cache", "true"]).prefix_cache_on());
        assert_eq!(profile_switches("no-prefix-cache = true"), Ok(vec![OsString::from("--no-prefix-cache")]));
        assert_eq!(profile_switches("no_prefix_cache = false"), Ok(vec![]));
        assert!(profile_switches("no-prefix-cache = \"yes\"").is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, "no-prefix-cache = true\n").unwrap();
        let p = path.to_str().unwrap();
        let argv: Vec<OsString> = ["tensorfold", "serve", "--profile", p].iter().map(OsString::from).collect();
        assert!(!with_profile(parse(&["serve", "--profile", p]), &argv).unwrap().prefix_cache_on());
        let argv: Vec<OsString> =
            ["tensorfold", "serve", "--profile", p, "--prefix-cache", "true"].iter().map(OsString::from).collect();
        let args = with_profile(parse(&["serve", "--profile", p, "--prefix-cache", "true"]), &argv).unwrap();
        assert!(args.prefix_cache_on(), "the command line wins over the profile");
    }

    #[test]
    fn profile_refuses_unknown_keys_and_bad_values() {
        assert!(profile_switches("no-such-flag = 1").unwrap_err().contains("no-such-flag"));
        assert!(profile_switches("profile = \"x\"").is_err());
        assert!(profile_switches("port = [1]").is_err());
        assert!(profile_switches("port = ").is_err());
        let argv = vec![OsString::from("serve")];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, "port = \"eighty\"").unwrap();
        let args = parse(&["serve", "--profile", path.to_str().unwrap()]);
        assert!(with_profile(args, &argv).is_err());
    }

    #[test]
    fn model_comes_positional_or_as_m_and_the_context_as_c_or_ctx_size() {
        let a = parse(&["serve", "/models/x", "--max-model-len", "64"]);
        assert_eq!((a.model_positional, a.model, a.max_model_len), (Some(PathBuf::from("/models/x")), None, Some(64)));
        let b = parse(&["serve", "-m", "/m", "-c", "32"]);
        assert_eq!((b.model, b.max_model_len), (Some(PathBuf::from("/m")), Some(32)));
        assert_eq!(parse(&["serve", "--ctx-size", "16"]).max_model_len, Some(16));
        assert!(ServeOnly::try_parse_from(["serve", "/a", "--model", "/b"]).is_err(), "two models");
        assert!(ServeOnly::try_parse_from(["serve", "-c", "0"]).is_err());
        assert_eq!(profile_switches("max-model-len = 128"), Ok(vec![OsString::from("--max-model-len=128")]));
        assert!(!options_table().contains("load-when-exists"), "hidden switches stay out of the table");
    }

    #[test]
    fn scheduling_defaults_follow_the_device_and_a_switch_wins() {
        let a = parse(&["serve"]);
        assert_eq!(a.sched_limits(true), GPU_SCHED);
        assert_eq!(a.sched_limits(false), CPU_SCHED);
        assert_eq!((GPU_SCHED.max_num_seqs, GPU_SCHED.max_round_tokens), (256, 8192));
        let b = parse(&["serve", "--max-num-seqs", "32", "--max-round-tokens", "1024"]);
        let l = b.sched_limits(true);
        assert_eq!((l.max_num_seqs, l.max_round_tokens, l.prefill_chunk), (32, 1024, GPU_SCHED.prefill_chunk));
        assert_eq!(b.sched_limits(false).max_num_seqs, 32);
    }

    #[test]
    fn every_switch_is_documented_with_accepted_values() {
        let table = options_table();
        for arg in ServeOnly::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long != "help" && !arg.is_hide_set() {
                let row = table.lines().find(|l| l.starts_with(&format!("| `--{long}` |"))).unwrap();
                assert!(!row.contains("|  |"), "--{long} lacks a column: {row}");
            }
        }
    }
}
