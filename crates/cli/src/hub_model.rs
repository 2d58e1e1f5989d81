//! `--model` as a hub name: a value that is not an existing path but reads as `ORG/NAME[:QUANT]`
//! becomes the cached snapshot (or GGUF file), pulled first when the cache lacks it.

use crate::args::Command;
use crate::exit::{Failure, failed, refused};
use crate::hub_env::hub_config;
use std::path::{Path, PathBuf};
use tf_hub::{HubError, Spec};

/// The local path for a `--model` value: an existing path as it is, else a hub spec resolved
/// (a value that is neither is left for the loader to refuse by name).
pub fn resolve_model(model: &Path) -> Result<PathBuf, Failure> {
    if model.exists() {
        return Ok(model.to_path_buf());
    }
    let Some(spec) = model.to_str().and_then(|s| Spec::parse(s, None).ok()) else { return Ok(model.to_path_buf()) };
    let cfg = hub_config();
    let mut display = crate::hub_progress::Display::new();
    tf_hub::resolve(&spec, &cfg, &mut display).map_err(|e| {
        let f = hub_failure(e);
        Failure { message: format!("--model {spec}: no such local path, and from the hub: {}", f.message), ..f }
    })
}

/// Resolves the `--model` of every command but `serve` (`resolve_serve`, once its profile is
/// read).
pub fn resolve_models(command: &mut Command) -> Result<(), Failure> {
    let model: Option<&mut PathBuf> = match command {
        Command::Check(a) => Some(&mut a.model),
        Command::Logits(a) => Some(&mut a.model),
        Command::Generate(a) => Some(&mut a.model),
        Command::Bench(a) => Some(&mut a.model),
        Command::BenchDraft(a) => Some(&mut a.model),
        Command::BenchPrefix(a) => Some(&mut a.model),
        Command::BenchServe(a) => a.model.as_mut(),
        Command::BenchStructured(a) => Some(&mut a.model),
        Command::Session(a) => match &mut a.command {
            crate::args::SessionCommand::Inspect(i) => i.model.as_mut(),
        },
        Command::Run(a) => a.model.as_mut().or(a.model_positional.as_mut()),
        _ => None,
    };
    if let Some(m) = model {
        *m = resolve_model(m)?;
    }
    Ok(())
}

/// Resolves `serve`'s `--model` (from the command line or its profile); a model from the hub is
/// served under its repo name unless `--served-model-name` says otherwise.
pub fn resolve_serve(a: &mut tf_server::ServeArgs) -> Result<(), Failure> {
    let Some(model) = a.model.take() else { return Ok(()) };
    let local = resolve_model(&model)?;
    if local != model && a.served_model_name.is_none() {
        a.served_model_name = model.to_str().and_then(|s| Spec::parse(s, None).ok()).map(|s| s.repo.to_string());
    }
    a.model = Some(local);
    Ok(())
}

/// A hub error as a command failure: exit 2 when the input (a name, the listing, a download's
/// bytes) is refused, 1 when the network or the disk failed.
pub fn hub_failure(e: HubError) -> Failure {
    match e {
        HubError::Network { .. } | HubError::Status { .. } | HubError::Io { .. } | HubError::NoSpace { .. } => {
            failed(e)
        }
        _ => refused(e),
    }
}
