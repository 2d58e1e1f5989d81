//! Loading a model for `serve` and `run`: a directory without a tokenizer refused before any
//! weight is read (unless `--skip-tokenizer-init`), progress lines on stderr while a large
//! checkpoint loads, and `--max-model-len` capping the context.

use crate::exit::{Failure, refused};
use std::path::Path;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};
use tf_backend::Backend;
use tf_core::{LoadProgress, ProgressSnapshot};
use tf_models::Model;

/// How often a progress line is printed while a checkpoint loads.
const REPORT_EVERY: Duration = Duration::from_secs(3);
/// How often `--load-when-exists` looks for its file.
const POLL: Duration = Duration::from_millis(20);

/// Refuses a checkpoint directory without `tokenizer.json` unless `skip` (a GGUF file carries
/// its vocabulary).
pub fn require_tokenizer(path: &Path, skip: bool) -> Result<(), Failure> {
    if skip || !path.is_dir() || path.join("tokenizer.json").exists() {
        return Ok(());
    }
    Err(refused(format!(
        "{} has no tokenizer.json: add one, or pass --skip-tokenizer-init to serve token-id requests only",
        path.display()
    )))
}

/// Waits until `file` exists (`serve --load-when-exists`).
pub fn wait_for(file: Option<&Path>) {
    while file.is_some_and(|f| !f.exists()) {
        std::thread::sleep(POLL);
    }
}

/// Loads `path` onto `backend` (rank 0 of `ranks.1` ranks of device `ranks.0`, where above 1:
/// crate::tp), counting in `progress`, with a line through `say` every few seconds until it is
/// done.
pub fn open_reporting<B: Backend + 'static>(
    path: &Path,
    backend: &B,
    progress: &LoadProgress,
    ranks: (&crate::args::DeviceArgs, tf_models::tp::GroupShape),
    say: fn(&str),
) -> Result<Model<B>, Failure> {
    let (done, wait) = channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let start = Instant::now();
            while let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(REPORT_EVERY) {
                say(&line(progress.snapshot(), start.elapsed()));
            }
        });
        let model = crate::tp::open(path, backend, progress, ranks.0, ranks.1);
        drop(done);
        model
    })
}

/// One progress line.
fn line(p: ProgressSnapshot, elapsed: Duration) -> String {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match p.tensors_done >= p.tensors_total && p.tensors_total > 0 {
        true => format!("loading: weights placed, checking them ({:.0}s)", elapsed.as_secs_f64()),
        false => format!(
            "loading: {:.0}% ({} of {} tensors, {:.2} of {:.2} GiB, {:.0}s)",
            p.fraction() * 100.0,
            p.tensors_done,
            p.tensors_total,
            gib(p.bytes_done),
            gib(p.bytes_total),
            elapsed.as_secs_f64()
        ),
    }
}

/// Caps the model's context at `max_model_len` (prompt plus output of one sequence); a value
/// above the model's own context is refused.
pub fn cap_context<B: Backend>(model: &mut Model<B>, max_model_len: Option<u64>) -> Result<(), Failure> {
    let Some(n) = max_model_len else { return Ok(()) };
    let ctx = model.decoder.spec.max_position_embeddings;
    match usize::try_from(n) {
        Ok(n) if n <= ctx => {
            model.decoder.spec.max_position_embeddings = n;
            Ok(())
        }
        _ => Err(refused(format!("--max-model-len {n} is above the model's context of {ctx} tokens"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_a_tokenizer_is_refused_unless_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let f = require_tokenizer(dir.path(), false).unwrap_err();
        assert_eq!(f.code, 2);
        assert!(f.message.contains("has no tokenizer.json") && f.message.contains("--skip-tokenizer-init"));
        assert!(require_tokenizer(dir.path(), true).is_ok());
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        assert!(require_tokenizer(dir.path(), false).is_ok());
    }

    #[test]
    fn progress_lines_say_the_share_then_the_check() {
        let p = LoadProgress::default();
        p.set_totals(4, 1 << 30);
        p.add_tensor(1 << 29);
        let l = line(p.snapshot(), Duration::from_secs(3));
        assert_eq!(l, "loading: 50% (1 of 4 tensors, 0.50 of 1.00 GiB, 3s)");
        for _ in 0..3 {
            p.add_tensor(1 << 27);
        }
        assert!(line(p.snapshot(), Duration::from_secs(4)).contains("checking"));
    }
}
