//! How a command fails: a one-line message and an exit code (2: refused input or checkpoint).

use std::fmt::Display;

/// A command's failure.
#[derive(Debug)]
pub struct Failure {
    /// Process exit code.
    pub code: i32,
    /// One-line reason.
    pub message: String,
}

/// Refused input (a checkpoint, ids, arguments): exit code 2.
pub fn refused(e: impl Display) -> Failure {
    Failure { code: 2, message: e.to_string().replace('\n', " ") }
}

/// Anything else that went wrong while running: exit code 1.
pub fn failed(e: impl Display) -> Failure {
    Failure { code: 1, message: e.to_string().replace('\n', " ") }
}
