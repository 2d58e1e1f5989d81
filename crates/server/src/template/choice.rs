//! Which chat template a served model uses: `--chat-template` (a built-in's name or a Jinja
//! file) wins, then the checkpoint's own, then its family's usual built-in (with a warning).

use super::builtin::{builtin, builtin_names, family_builtin};
use std::path::PathBuf;

/// Where the chosen template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `--chat-template NAME`: a built-in.
    SwitchBuiltin(&'static str),
    /// `--chat-template FILE`.
    SwitchFile(PathBuf),
    /// The checkpoint's own (`tokenizer_config.json`, `chat_template.jinja`, GGUF metadata).
    Checkpoint,
    /// The family's usual built-in, the checkpoint having none.
    Family(&'static str),
}

/// The template a model is served with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The Jinja source.
    pub source: String,
    /// Where it came from.
    pub origin: Origin,
    /// A built-in's end-of-turn token text, which must end generation (as the family's
    /// `generation_config.json` says); `None` for templates TensorFold did not write.
    pub end_of_turn: Option<&'static str>,
}

impl Choice {
    /// Where the template came from, in words (for the startup log).
    pub fn describe(&self) -> String {
        match &self.origin {
            Origin::SwitchBuiltin(name) => format!("the built-in {name} template (--chat-template)"),
            Origin::SwitchFile(path) => format!("{} (--chat-template)", path.display()),
            Origin::Checkpoint => "the checkpoint's own template".to_string(),
            Origin::Family(name) => format!("the built-in {name} template (the family's usual one)"),
        }
    }

    /// The startup warning a family fallback deserves.
    pub fn warning(&self, architecture: &str) -> Option<String> {
        let Origin::Family(name) = &self.origin else { return None };
        Some(format!(
            "the model has no chat template; chat uses the built-in {name} template, the usual one of \
             {architecture} (--chat-template NAME|FILE picks another; built-ins: {})",
            builtin_names()
        ))
    }
}

/// Chooses the template: `switch` (`--chat-template`: a built-in's name, else a file path),
/// else `own` (the checkpoint's), else the family's usual built-in for `architecture`
/// (`has_token` tells whether the vocabulary holds a token text). `None`: no template at all.
/// An unknown name or an unreadable file is an error naming it.
pub fn choose(
    switch: Option<&str>,
    own: Option<&str>,
    architecture: &str,
    has_token: &dyn Fn(&str) -> bool,
) -> Result<Option<Choice>, String> {
    if let Some(value) = switch {
        return from_switch(value).map(Some);
    }
    if let Some(source) = own {
        return Ok(Some(Choice { source: source.to_string(), origin: Origin::Checkpoint, end_of_turn: None }));
    }
    Ok(family_builtin(architecture, has_token).map(|b| Choice {
        source: b.source.to_string(),
        origin: Origin::Family(b.name),
        end_of_turn: b.end_of_turn,
    }))
}

/// `--chat-template VALUE`: a built-in's name first, else a file holding Jinja text.
fn from_switch(value: &str) -> Result<Choice, String> {
    if let Some(b) = builtin(value) {
        return Ok(Choice {
            source: b.source.to_string(),
            origin: Origin::SwitchBuiltin(b.name),
            end_of_turn: b.end_of_turn,
        });
    }
    let path = PathBuf::from(value);
    let bytes = tf_core::regular_file::read_regular(&path).map_err(|e| {
        let why = match e {
            tf_core::safe_file::SafeFileError::Io { source, .. } => io_reason(&source),
            tf_core::safe_file::SafeFileError::NotRegular { kind, .. } => format!("it is a {kind}"),
            other => other.to_string(),
        };
        format!("--chat-template {value}: not a built-in template ({}) and not a readable file: {why}", builtin_names())
    })?;
    let source =
        String::from_utf8(bytes).map_err(|_| format!("--chat-template {value}: the file is not UTF-8 text"))?;
    if source.trim().is_empty() {
        return Err(format!("--chat-template {value}: the file is empty"));
    }
    Ok(Choice { source, origin: Origin::SwitchFile(path), end_of_turn: None })
}

/// An I/O error in a few words (`no such file or directory`, `is a directory`, ...).
fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::IsADirectory => "it is a directory".to_string(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA3_VOCAB: &[&str] = &["<|start_header_id|>", "<|eot_id|>"];

    fn none(_: &str) -> bool {
        false
    }

    fn llama3_vocab(t: &str) -> bool {
        LLAMA3_VOCAB.contains(&t)
    }

    #[test]
    fn the_switch_wins_then_the_checkpoint_then_the_family() {
        let own = Some("{{ messages }}");
        let c = choose(Some("gemma"), own, "Qwen3ForCausalLM", &none).unwrap().unwrap();
        assert_eq!((c.origin.clone(), c.end_of_turn), (Origin::SwitchBuiltin("gemma"), Some("<end_of_turn>")));
        assert!(c.source.contains("<start_of_turn>") && c.warning("Qwen3ForCausalLM").is_none());

        let c = choose(None, own, "Gemma3ForCausalLM", &none).unwrap().unwrap();
        assert_eq!((c.source.as_str(), c.origin.clone(), c.end_of_turn), ("{{ messages }}", Origin::Checkpoint, None));
        assert!(c.warning("Gemma3ForCausalLM").is_none());

        let c = choose(None, None, "Gemma3ForCausalLM", &none).unwrap().unwrap();
        assert_eq!(c.origin, Origin::Family("gemma"));
        let warning = c.warning("Gemma3ForCausalLM").unwrap();
        assert!(warning.contains("no chat template") && warning.contains("gemma"), "{warning}");
    }

    #[test]
    fn families_map_to_their_usual_templates() {
        let family = |arch: &str, has: &dyn Fn(&str) -> bool| {
            choose(None, None, arch, has).unwrap().map(|c| (c.origin, c.end_of_turn))
        };
        assert_eq!(family("Qwen3ForCausalLM", &none), Some((Origin::Family("chatml"), Some("<|im_end|>"))));
        assert_eq!(family("Qwen3MoeForCausalLM", &none), Some((Origin::Family("chatml"), Some("<|im_end|>"))));
        assert_eq!(family("LlamaForCausalLM", &llama3_vocab), Some((Origin::Family("llama3"), Some("<|eot_id|>"))));
        assert_eq!(family("LlamaForCausalLM", &none), Some((Origin::Family("llama2"), None)));
        assert_eq!(family("MysteryForCausalLM", &none), None);
    }

    #[test]
    fn a_file_is_read_and_bad_values_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jinja");
        std::fs::write(&path, "{{ bos_token }}x").unwrap();
        let c = choose(path.to_str(), Some("own"), "Gemma3ForCausalLM", &none).unwrap().unwrap();
        assert_eq!(
            (c.source.as_str(), c.origin, c.end_of_turn),
            ("{{ bos_token }}x", Origin::SwitchFile(path.clone()), None)
        );

        let err = choose(Some("chatm1"), None, "Gemma3ForCausalLM", &none).unwrap_err();
        assert!(err.contains("chatm1") && err.contains("chatml, gemma") && err.contains("no such file"), "{err}");
        let err = choose(dir.path().to_str(), None, "Gemma3ForCausalLM", &none).unwrap_err();
        assert!(err.contains("not a readable file"), "{err}");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(choose(path.to_str(), None, "x", &none).unwrap_err().contains("not UTF-8"));
        std::fs::write(&path, " \n").unwrap();
        assert!(choose(path.to_str(), None, "x", &none).unwrap_err().contains("empty"));
    }
}
