//! `tensorfold pull`, `list` and `rm`: the Hugging Face cache from the command line.

use crate::exit::{Failure, refused};
use crate::hub_env::hub_config;
use crate::hub_model::hub_failure;
use clap::Args;
use tf_hub::{RepoId, Spec};

/// `pull`.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// The model: `ORG/NAME` (config, tokenizer and safetensors weights), `ORG/NAME:QUANT` (the
    /// one GGUF file whose name holds the quant, e.g. Q4_K_M) or `ORG/NAME:FILE.gguf`.
    pub model: String,
    /// Branch, tag or commit to pull.
    #[arg(long)]
    pub revision: Option<String>,
}

/// `list`.
#[derive(Args, Debug)]
pub struct ListArgs {}

/// `rm`.
#[derive(Args, Debug)]
pub struct RmArgs {
    /// The repo to remove from the cache, `ORG/NAME` (every revision and file of it).
    pub repo: String,
}

/// Runs `pull`: prints the snapshot directory (or GGUF file) on stdout.
pub fn pull(a: &PullArgs) -> Result<(), Failure> {
    let cfg = hub_config();
    let spec = Spec::parse(&a.model, a.revision.as_deref()).map_err(hub_failure)?;
    let mut display = crate::hub_progress::Display::new();
    let pulled = tf_hub::pull(&spec, &cfg, &mut display).map_err(hub_failure)?;
    drop(display);
    eprintln!("pulled {spec} at {} ({} files, {} fetched)", pulled.commit, pulled.files.len(), human(pulled.fetched));
    println!("{}", pulled.path.display());
    Ok(())
}

/// Runs `list`: one line per cached model repo.
pub fn list(_: &ListArgs) -> Result<(), Failure> {
    let cfg = hub_config();
    let repos = tf_hub::list(&cfg.cache_dir).map_err(hub_failure)?;
    if repos.is_empty() {
        eprintln!("no models in {}", cfg.cache_dir.display());
        return Ok(());
    }
    let width = repos.iter().map(|r| r.repo.as_str().len()).max().unwrap_or(0).max(4);
    println!("{:width$}  {:>9}  REVISIONS", "REPO", "SIZE");
    for r in repos {
        let mut revs: Vec<String> = r.refs.iter().map(|(rev, c)| format!("{rev}={}", &c[..12])).collect();
        revs.extend(r.commits.iter().filter(|c| !r.refs.iter().any(|(_, rc)| rc == *c)).map(|c| c[..12].to_string()));
        println!("{:width$}  {:>9}  {}", r.repo.as_str(), human(r.size), revs.join(" "));
    }
    Ok(())
}

/// Runs `rm`.
pub fn rm(a: &RmArgs) -> Result<(), Failure> {
    let cfg = hub_config();
    let repo = RepoId::parse(&a.repo).map_err(hub_failure)?;
    match tf_hub::remove(&cfg.cache_dir, &repo).map_err(hub_failure)? {
        Some(bytes) => {
            eprintln!("removed {repo} ({} freed)", human(bytes));
            Ok(())
        }
        None => Err(refused(format!("{repo} is not in the cache {}", cfg.cache_dir.display()))),
    }
}

/// Bytes in the largest unit that keeps the number at least 1 (decimal units, as the hub shows).
fn human(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", units[i]) }
}
