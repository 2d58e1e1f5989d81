//! What a user names on the command line: `ORG/NAME`, `ORG/NAME:QUANT` (a GGUF file by its
//! quant, llama.cpp's convention) or `ORG/NAME:FILE.gguf`, optionally after `hf.co/`.

use crate::error::{HubError, Result};
use crate::names::{RepoId, check_revision, path_problem};

/// Which file of a repo to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// The safetensors checkpoint, or a repo's only GGUF file (or its `Q4_K_M` one).
    Default,
    /// The GGUF file whose name carries this quant (case-insensitive).
    Quant(String),
    /// This GGUF file.
    File(String),
}

/// A model on the hub: repo, file choice and revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The repo.
    pub repo: RepoId,
    /// Which file(s).
    pub pick: Pick,
    /// Branch, tag or commit (`main` unless given).
    pub revision: String,
}

impl Spec {
    /// Parses `REPO[:QUANT|:FILE.gguf]` at `revision` (default `main`).
    pub fn parse(s: &str, revision: Option<&str>) -> Result<Spec> {
        let s = ["https://huggingface.co/", "huggingface.co/", "hf.co/"]
            .iter()
            .find_map(|p| s.strip_prefix(p))
            .unwrap_or(s);
        let (repo, pick) = match s.split_once(':') {
            None => (s, Pick::Default),
            Some((repo, tag)) if tag.to_ascii_lowercase().ends_with(".gguf") => {
                if path_problem(tag).is_some() {
                    return Err(HubError::BadRepoId(s.escape_debug().to_string()));
                }
                (repo, Pick::File(tag.to_string()))
            }
            Some((repo, tag)) => {
                let ok = !tag.is_empty()
                    && tag.len() <= 64
                    && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !ok {
                    return Err(HubError::BadRepoId(s.escape_debug().to_string()));
                }
                (repo, Pick::Quant(tag.to_string()))
            }
        };
        let revision = revision.unwrap_or("main").to_string();
        check_revision(&revision)?;
        Ok(Spec { repo: RepoId::parse(repo)?, pick, revision })
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.repo)?;
        match &self.pick {
            Pick::Default => Ok(()),
            Pick::Quant(q) | Pick::File(q) => write!(f, ":{q}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() -> Result<()> {
        let s = Spec::parse("unsloth/gemma-3-270m-it-GGUF:q4_k_m", None)?;
        assert_eq!(
            (s.repo.as_str(), &s.pick, s.revision.as_str()),
            ("unsloth/gemma-3-270m-it-GGUF", &Pick::Quant("q4_k_m".into()), "main")
        );
        assert_eq!(Spec::parse("hf.co/a/b:x.GGUF", Some("v1"))?.pick, Pick::File("x.GGUF".into()));
        assert_eq!(Spec::parse("a/b", None)?.pick, Pick::Default);
        for bad in ["a/b:", "a/b:../x.gguf", "a/b:q 4", "./model", "model.gguf", "/abs/path"] {
            assert!(Spec::parse(bad, None).is_err(), "{bad}");
        }
        assert!(Spec::parse("a/b", Some("../x")).is_err());
        Ok(())
    }
}
