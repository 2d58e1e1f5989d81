//! `tensorfold run`'s switches.

use crate::args::{DeviceArgs, at_least_one, at_least_zero};
use clap::Args;
use std::path::PathBuf;

/// `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory (holding config.json), or a hub repo
    /// `ORG/NAME[:QUANT]` (from the hub cache, pulled when missing).
    #[arg(value_name = "MODEL", required_unless_present = "model", conflicts_with = "model")]
    pub model_positional: Option<PathBuf>,
    /// One message to answer, then exit (without it, and with stdin a terminal, a chat starts).
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// The model, as a switch (the same as MODEL).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Chat template: a built-in (chatml, gemma, llama2, llama3, qwen3) or a Jinja file; else the
    /// checkpoint's own, else the family's usual one.
    #[arg(long)]
    pub chat_template: Option<String>,
    /// A system message in front of the conversation (`/set system` changes it).
    #[arg(long)]
    pub system: Option<String>,
    /// Longest conversation in tokens (prompt plus reply; vLLM's `--max-model-len`, llama.cpp's
    /// `-c`). Default: the model's context, at most 4096.
    #[arg(long, short = 'c', visible_alias = "ctx-size", allow_negative_numbers = true, value_parser = at_least_one)]
    pub max_model_len: Option<usize>,
    /// Tokens of one reply at most (default: what the context leaves).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least_one)]
    pub max_tokens: Option<usize>,
    /// Sampling temperature, 0 to 100; 0 is greedy.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Nucleus sampling mass, above 0 and at most 1.
    #[arg(long, default_value_t = 0.9, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40, allow_negative_numbers = true, value_parser = at_least_zero::<u32>)]
    pub top_k: u32,
    /// Drop tokens below this fraction of the top probability, 0 to 1.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Repetition penalty, above 0 (1: off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repetition_penalty: f32,
    /// Random seed of every reply (default: a fresh one per reply).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least_zero::<u64>)]
    pub seed: Option<u64>,
    /// Show a reasoning model's thinking between `Thinking...` and `...done thinking.`, and keep
    /// only its answers in the conversation: `qwen3`, `deepseek_r1` or `gpt_oss`, as `serve`
    /// takes them (gpt-oss's harmony messages are read with `gpt_oss` unless another is named).
    #[arg(long)]
    pub reasoning_parser: Option<String>,
    /// With `--reasoning-parser`, print the answers only.
    #[arg(long, requires = "reasoning_parser")]
    pub hide_thinking: bool,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}
