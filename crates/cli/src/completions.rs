//! `tensorfold completions SHELL`: the shell's completion script for every command and switch.

use crate::exit::{Failure, failed};
use clap::Args;
use clap_complete::Shell;
use std::io::Write;

/// `completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// Prints the completion script on stdout.
pub fn run(a: &CompletionsArgs) -> Result<(), Failure> {
    let mut cmd = crate::cli_shape::command(false);
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "tensorfold", &mut out);
    std::io::stdout().lock().write_all(&out).map_err(failed)
}
