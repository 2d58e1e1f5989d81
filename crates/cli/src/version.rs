//! What `--version` prints: the version, the git commit the binary was built from, the backends
//! compiled in and, in a CUDA build, the driver found.

/// The commit the binary was built from ("unknown" without git at build time).
pub const COMMIT: &str = env!("TENSORFOLD_COMMIT");

/// `-V`: the version and commit on one line.
pub fn short() -> String {
    format!("{} ({COMMIT})", env!("CARGO_PKG_VERSION"))
}

/// `--version`: one line each for the version, the commit, the backends and the CUDA driver.
pub fn long() -> String {
    let mut text = format!("{}\ncommit: {COMMIT}\nbackends: {}", env!("CARGO_PKG_VERSION"), crate::device::backends());
    if let Some(driver) = crate::device::cuda_driver() {
        text.push_str(&format!("\ncuda driver: {driver}"));
    }
    text
}
