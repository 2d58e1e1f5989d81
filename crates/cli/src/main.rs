//! `tensorfold`: load, check, run and benchmark open-weight language models.

mod args;
mod bench;
mod bench_cost;
mod bench_draft;
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
mod logits;
mod serve;
mod session_inspect;
mod synth;

use clap::Parser;
use exit::Failure;

fn main() {
    let mut cli = args::Cli::parse();
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
    };
    if let Err(f) = result {
        eprintln!("error: {}", f.message);
        std::process::exit(f.code);
    }
}
