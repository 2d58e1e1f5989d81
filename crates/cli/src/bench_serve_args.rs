//! `bench-serve`'s switches (named as `vllm bench serve` names them), each bounded.

use crate::args::{at_least_one, at_least_zero};
use clap::Args;
use std::path::PathBuf;

/// Most requests of one run.
pub const MAX_PROMPTS: usize = 100_000;
/// Most requests in flight at once.
pub const MAX_CONCURRENCY: usize = 4096;
/// Most tokens of one prompt or one output.
pub const MAX_LEN: usize = 131_072;

/// `bench-serve`.
#[derive(Args, Debug)]
pub struct BenchServeArgs {
    /// A running server's base URL, loopback only (http://127.0.0.1:PORT).
    #[arg(long, conflicts_with = "model", required_unless_present = "model")]
    pub url: Option<String>,
    /// Start `tensorfold serve` on this model (a GGUF file or a Hugging Face checkpoint
    /// directory) on an ephemeral loopback port, and stop it at the end; serve's own switches
    /// follow a `--`.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Requests in all (at most 100000).
    #[arg(long, default_value_t = 1000, allow_negative_numbers = true, value_parser = bounded::<MAX_PROMPTS>)]
    pub num_prompts: usize,
    /// Requests in flight at most (at most 4096; default: no cap but --num-prompts).
    #[arg(long, allow_negative_numbers = true, value_parser = bounded::<MAX_CONCURRENCY>)]
    pub max_concurrency: Option<usize>,
    /// Requests per second, arriving as a Poisson process drawn from --seed; `inf` sends them
    /// all at once (then --max-concurrency paces them).
    #[arg(long, default_value = "inf", allow_negative_numbers = true, value_parser = rate)]
    pub request_rate: f64,
    /// Lengths: `random` (--random-input-len and --random-output-len, spread by
    /// --random-range-ratio; 0 makes them fixed) or `sharegpt` (a mix shaped like ShareGPT
    /// conversations' lengths, generated from --seed: no download).
    #[arg(long, default_value = "random", value_parser = ["random", "sharegpt"])]
    pub dataset: String,
    /// Prompt tokens of `random` requests.
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true, value_parser = bounded::<MAX_LEN>)]
    pub random_input_len: usize,
    /// Output tokens of `random` requests.
    #[arg(long, default_value_t = 128, allow_negative_numbers = true, value_parser = bounded::<MAX_LEN>)]
    pub random_output_len: usize,
    /// Lengths are drawn uniformly from [len * (1 - r), len * (1 + r)]; 0 to below 1.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = range_ratio)]
    pub random_range_ratio: f64,
    /// Output tokens of every `sharegpt` request instead of the mix's own.
    #[arg(long, allow_negative_numbers = true, value_parser = bounded::<MAX_LEN>)]
    pub sharegpt_output_len: Option<usize>,
    /// Prompts as `ids` (random token ids, sent as a list) or `text` (those ids detokenized
    /// by the server before the run, sent as a string).
    #[arg(long, default_value = "ids", value_parser = ["ids", "text"])]
    pub prompt_kind: String,
    /// Prompt ids are drawn below this (default: the vocabulary size the server's /detokenize accepts).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least_one)]
    pub vocab_size: Option<usize>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Nucleus sampling mass (sent when given).
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f32>,
    /// Keep the k most likely tokens (sent when given).
    #[arg(long, allow_negative_numbers = true, value_parser = at_least_zero::<u32>)]
    pub top_k: Option<u32>,
    /// Seed of the lengths, prompts and arrivals; request i samples with seed + i.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least_zero::<u64>)]
    pub seed: u64,
    /// Keep generating past EOS, so every output has the asked length (`false` lets EOS end it).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub ignore_eos: bool,
    /// Seconds one request may take before it is counted as failed.
    #[arg(long, default_value_t = 600, allow_negative_numbers = true, value_parser = bounded::<86_400>)]
    pub request_timeout: usize,
    /// Seconds the whole run may take: then no more requests are sent and those in flight are
    /// cut (counted as failed); the figures cover the completed ones.
    #[arg(long, allow_negative_numbers = true, value_parser = bounded::<86_400>)]
    pub time_limit: Option<usize>,
    /// Seconds the server started by --model may take to listen.
    #[arg(long, default_value_t = 900, allow_negative_numbers = true, value_parser = bounded::<86_400>)]
    pub server_timeout: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    pub result_json: Option<PathBuf>,
    /// `serve` switches for the server --model starts (after `--`; not --host or --port).
    #[arg(last = true, requires = "model")]
    pub serve_args: Vec<String>,
}

/// A count from 1 to `MAX`.
fn bounded<const MAX: usize>(s: &str) -> Result<usize, String> {
    match at_least_one(s)? {
        n if n > MAX => Err(format!("must be at most {MAX}")),
        n => Ok(n),
    }
}

/// Requests per second: above 0, or `inf`.
fn rate(s: &str) -> Result<f64, String> {
    match s.trim() {
        "inf" => Ok(f64::INFINITY),
        t => match t.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
            _ => Err(format!("'{s}' is not a rate above 0 or 'inf'")),
        },
    }
}

/// A spread from 0 to below 1.
fn range_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..1.0).contains(&r) => Ok(r),
        _ => Err(format!("'{s}' is not a number from 0 to below 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rates_and_ratios_are_bounded() {
        assert_eq!(bounded::<10>("10"), Ok(10));
        assert!(bounded::<10>("11").is_err() && bounded::<10>("0").is_err() && bounded::<10>("-3").is_err());
        assert_eq!(rate("inf"), Ok(f64::INFINITY));
        assert_eq!(rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "nan", "x", "1e400"] {
            assert!(rate(bad).is_err(), "{bad}");
        }
        assert_eq!(range_ratio("0"), Ok(0.0));
        assert!(range_ratio("1").is_err() && range_ratio("-0.1").is_err());
    }
}
