//! The command line as users see it, shaped in one place for every command: `-V` / `--version`
//! with the commit (the long form built only when asked for), `-m` for every `--model`, and the
//! switches of `--help` grouped under headings.

use crate::args::Cli;
use clap::{Arg, Command, CommandFactory};

/// Switch ids (field names) by the `--help` heading they are listed under.
const HEADINGS: &[(&str, &[&str])] = &[
    ("Model", &["model", "model_positional", "chat_template", "served_model_name", "profile", "skip_tokenizer_init"]),
    ("Prompt", &["prompt", "ids", "system", "json"]),
    (
        "Device",
        &[
            "device",
            "threads",
            "quant_acts",
            "int_dot",
            "kv_cache_dtype",
            "cuda_graphs",
            "trace",
            "trace_out",
            "trace_mark",
            "cuda_split",
            "cuda_glu_store_rows",
            "cuda_graph_rows",
            "cuda_fp8_gemv_rows",
            "cuda_moe_gemm",
            "cuda_pdl",
            "kv_memory",
            "gpu_memory_utilization",
            "block_size",
        ],
    ),
    (
        "Server",
        &["host", "port", "header_read_timeout", "body_read_timeout", "idle_timeout", "max_connections", "api_key"],
    ),
    ("Sessions", &["session", "session_dir"]),
    (
        "Limits",
        &[
            "max_model_len",
            "max_body_bytes",
            "max_prompt_tokens",
            "max_tokens_limit",
            "max_n",
            "max_queue",
            "max_stop_strings",
            "max_stop_bytes",
            "prompt_bytes_per_token",
            "chat_template_fuel",
            "max_logprobs",
            "max_logit_bias",
        ],
    ),
    (
        "Scheduling",
        &[
            "max_num_seqs",
            "max_round_tokens",
            "prefill_chunk",
            "chunk",
            "prefix_cache",
            "no_prefix_cache",
            "overlap",
            "draft",
            "num_draft_tokens",
        ],
    ),
    (
        "Sampling",
        &[
            "max_tokens",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "repetition_penalty",
            "presence_penalty",
            "frequency_penalty",
            "seed",
            "stop",
            "stop_ids",
            "ignore_eos",
        ],
    ),
];

/// The whole command line; `long_version` builds `--version`'s text (it may probe for a driver).
pub fn command(long_version: bool) -> Command {
    let cmd = Cli::command().version(crate::version::short());
    let cmd = if long_version { cmd.long_version(crate::version::long()) } else { cmd };
    cmd.mut_subcommands(shape)
}

/// `-m` for `--model` (a switch, not `pull`'s positional MODEL) and the headings, in `sc` and its
/// subcommands.
fn shape(sc: Command) -> Command {
    let bare_model =
        sc.get_arguments().any(|a| a.get_id() == "model" && a.get_short().is_none() && a.get_long().is_some());
    let sc = if bare_model { sc.mut_arg("model", |a| a.short('m')) } else { sc };
    sc.mut_args(with_heading).mut_subcommands(shape)
}

fn with_heading(a: Arg) -> Arg {
    let id = a.get_id().as_str();
    match HEADINGS.iter().find(|(_, ids)| ids.contains(&id)) {
        Some((heading, _)) => a.help_heading(*heading),
        None => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_switch_has_m_and_the_command_line_is_consistent() {
        let mut cmd = command(true);
        cmd.build();
        for sc in cmd.get_subcommands() {
            for a in sc.get_arguments().filter(|a| a.get_id() == "model" && !a.is_positional()) {
                assert_eq!(a.get_short(), Some('m'), "{}", sc.get_name());
            }
        }
        let serve = cmd.find_subcommand("serve").unwrap();
        let heading = |id: &str| serve.get_arguments().find(|a| a.get_id() == id).and_then(|a| a.get_help_heading());
        assert_eq!(
            (heading("port"), heading("max_model_len"), heading("device")),
            (Some("Server"), Some("Limits"), Some("Device"))
        );
    }

    #[test]
    fn every_heading_lists_each_id_once() {
        let mut seen = std::collections::HashSet::new();
        for id in HEADINGS.iter().flat_map(|(_, ids)| ids.iter()) {
            assert!(seen.insert(id), "{id} is under two headings");
        }
    }
}
