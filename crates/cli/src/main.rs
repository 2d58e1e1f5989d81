//! `tensorfold`: load, check, run and benchmark open-weight language models.

mod args;
mod bench;
mod bench_cost;
mod bench_draft;
mod bench_fp8;
mod bench_pick;
mod bench_prefix;
mod bench_serve;
mod bench_serve_args;
mod bench_serve_http;
mod bench_serve_request;
mod bench_serve_spawn;
mod bench_serve_stats;
mod bench_serve_workload;
mod bench_structured;
mod chat_template;
mod check;
mod cli_shape;
mod completions;
mod conn_limits;
mod device;
mod exit;
mod gen_text;
mod generate;
mod generate_session;
mod hub_cmd;
mod hub_env;
mod hub_model;
mod hub_progress;
mod load;
mod logits;
mod run;
mod run_args;
mod run_chat;
mod run_input;
mod run_repl;
mod run_thinking;
mod serve;
mod session_inspect;
mod synth;
mod tp;
mod version;

use clap::FromArgMatches;
use exit::Failure;

fn main() {
    let long_version = std::env::args_os().nth(1).is_some_and(|a| a == "--version");
    let matches = cli_shape::command(long_version).get_matches();
    let mut cli = args::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Err(f) = hub_model::resolve_models(&mut cli.command) {
        eprintln!("error: {}", f.message);
        std::process::exit(f.code);
    }
    let result: Result<(), Failure> = match cli.command {
        args::Command::Check(a) => check::run(&a),
        args::Command::Logits(a) => logits::run(&a),
        args::Command::Generate(a) => generate::run(&a),
        args::Command::Synth(a) => synth::run(&a),
        args::Command::Bench(a) => bench::run(&a),
        args::Command::BenchDraft(a) => bench_draft::run(&a),
        args::Command::BenchPrefix(a) => bench_prefix::run(&a),
        args::Command::BenchServe(a) => bench_serve::run(&a),
        args::Command::BenchStructured(a) => bench_structured::run(&a),
        args::Command::Session(a) => session_inspect::run(&a),
        args::Command::Serve(a) => serve::run(a),
        args::Command::Pull(a) => hub_cmd::pull(&a),
        args::Command::List(a) => hub_cmd::list(&a),
        args::Command::Rm(a) => hub_cmd::rm(&a),
        args::Command::Run(a) => run::run(&a),
        args::Command::Completions(a) => completions::run(&a),
    };
    if let Err(f) = result {
        eprintln!("error: {}", f.message);
        std::process::exit(f.code);
    }
}
