//! Which files of a repo the engine reads: config, tokenizer and generation files and the
//! safetensors weights (one file, or the shards `model.safetensors.index.json` names), or one
//! GGUF file chosen by quant or name (a split one by its first shard, `-00001-of-0000N.gguf`,
//! with every shard). Works on names alone, so the same rules pick from the hub's listing and
//! from a cached snapshot.

use crate::error::{HubError, Result};
use crate::names::{RepoId, path_problem};
use crate::spec::Pick;
use std::collections::BTreeSet;

/// Files read beside the weights when present.
const SIDE_FILES: [&str; 6] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
];
/// The single-file weights.
const SINGLE: &str = "model.safetensors";
/// The sharded weights' index.
pub const INDEX: &str = "model.safetensors.index.json";
/// The quant picked when a GGUF repo holds several and none is named (llama.cpp's default).
const DEFAULT_QUANT: &str = "Q4_K_M";

/// What to fetch or use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// A Hugging Face checkpoint directory: these files, plus the shards of `INDEX` when sharded.
    Checkpoint {
        /// `config.json`, the side files present, and `model.safetensors` or the index.
        files: Vec<String>,
        /// Whether the weights are sharded (the index's shards come on top of `files`).
        sharded: bool,
    },
    /// One GGUF file (a split one's first shard: [`gguf_set`] names them all).
    Gguf(String),
}

/// Chooses among `names` (a listing's or a snapshot's files) for `pick`.
pub fn choose(repo: &RepoId, names: &[&str], pick: &Pick) -> Result<Choice> {
    let has = |n: &str| names.contains(&n);
    match pick {
        Pick::File(f) if has(f) => Ok(Choice::Gguf(f.clone())),
        Pick::File(f) => Err(choice(repo, &format!("no file {f:?}; GGUF files: {}", ggufs(names).join(", ")))),
        Pick::Quant(q) => by_quant(repo, names, q),
        Pick::Default if has("config.json") && (has(SINGLE) || has(INDEX)) => {
            let mut files = vec!["config.json".to_string()];
            files.extend(SIDE_FILES.iter().filter(|f| has(f)).map(|f| f.to_string()));
            let sharded = has(INDEX);
            files.push(if sharded { INDEX } else { SINGLE }.to_string());
            Ok(Choice::Checkpoint { files, sharded })
        }
        Pick::Default => match ggufs(names).as_slice() {
            [] => Err(choice(repo, "holds neither config.json with safetensors weights nor a GGUF file")),
            [one] => Ok(Choice::Gguf(one.to_string())),
            _ => by_quant(repo, names, DEFAULT_QUANT).map_err(|_| {
                choice(
                    repo,
                    &format!(
                        "holds several GGUF files; name one as REPO:QUANT or REPO:FILE: {}",
                        ggufs(names).join(", ")
                    ),
                )
            }),
        },
    }
}

/// The GGUF files among `names`, multimodal projectors, MTP companions (`mtp-STEM.gguf`: the
/// draft block of the model beside it, alone) and split files' later shards left out.
fn ggufs<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let companion = |n: &str| n.rsplit('/').next().is_some_and(|base| base.to_ascii_lowercase().starts_with("mtp-"));
    let mut v: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf") && !n.to_ascii_lowercase().contains("mmproj"))
        .filter(|n| !companion(n))
        .filter(|n| split_of(n).is_none_or(|(_, k, _)| k == 1))
        .collect();
    v.sort_unstable();
    v
}

/// `(PREFIX, k, n)` of a split GGUF file's shard `PREFIX-0000k-of-0000n.gguf` (llama.cpp's
/// `gguf-split` names, five digits each, `1 <= k <= n`).
fn split_of(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, n) = stem.rsplit_once("-of-")?;
    let (prefix, k) = rest.rsplit_once('-')?;
    let number =
        |s: &str| (s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u32>().ok()).flatten();
    let (k, n) = (number(k)?, number(n)?);
    (1 <= k && k <= n).then_some((prefix, k, n))
}

/// The files of the GGUF file `file` chosen from `names`: itself, or for a split file's first
/// shard every shard, each present in `names`.
pub fn gguf_set(repo: &RepoId, names: &[&str], file: &str) -> Result<Vec<String>> {
    let Some((prefix, 1, n)) = split_of(file).filter(|&(_, _, n)| n > 1) else { return Ok(vec![file.to_string()]) };
    (1..=n)
        .map(|k| {
            let shard = format!("{prefix}-{k:05}-of-{n:05}.gguf");
            match names.contains(&shard.as_str()) {
                true => Ok(shard),
                false => Err(choice(repo, &format!("{file} is shard 1 of {n}, but the repo lacks {shard:?}"))),
            }
        })
        .collect()
}

/// The one GGUF file whose name holds `quant` as a whole token.
fn by_quant(repo: &RepoId, names: &[&str], quant: &str) -> Result<Choice> {
    let all = ggufs(names);
    let hits: Vec<&str> = all.iter().copied().filter(|n| holds_quant(n, quant)).collect();
    match hits.as_slice() {
        [one] => Ok(Choice::Gguf(one.to_string())),
        [] => Err(choice(repo, &format!("no GGUF file for quant {quant:?}; choices: {}", or_none(&all)))),
        _ => Err(choice(repo, &format!("quant {quant:?} is ambiguous: {}", hits.join(", ")))),
    }
}

fn or_none(v: &[&str]) -> String {
    if v.is_empty() { "none (the repo has no GGUF file)".into() } else { v.join(", ") }
}

/// Whether `name` holds `quant` (case-insensitive) with no letter or digit before it and no
/// letter, digit or `_` after it (so `Q4_K` is not `Q4_K_M`, nor `Q4_0` `IQ4_0`).
pub fn holds_quant(name: &str, quant: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    let q = quant.to_ascii_lowercase();
    let bytes = base.as_bytes();
    base.match_indices(&q).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + q.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// The shard files a `model.safetensors.index.json` names, each checked and present in `names`.
pub fn shards(repo: &RepoId, index: &[u8], names: &[&str]) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::HashMap<String, String>,
    }
    let ix: Index = serde_json::from_slice(index)
        .map_err(|e| HubError::BadListing { repo: repo.to_string(), what: format!("{INDEX}: {e}") })?;
    let files: BTreeSet<&str> = ix.weight_map.values().map(String::as_str).collect();
    for f in &files {
        if let Some(why) = path_problem(f) {
            return Err(HubError::UnsafeName { repo: repo.to_string(), name: f.to_string(), why });
        }
        if !names.contains(f) {
            return Err(choice(repo, &format!("{INDEX} names {f:?}, which the repo does not hold")));
        }
    }
    if files.is_empty() {
        return Err(choice(repo, &format!("{INDEX} names no shard")));
    }
    Ok(files.into_iter().map(str::to_string).collect())
}

fn choice(repo: &RepoId, what: &str) -> HubError {
    HubError::Choice { repo: repo.to_string(), what: what.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GGUF_REPO: [&str; 6] =
        ["README.md", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-IQ4_XS.gguf", "mmproj-m-F16.gguf", "mtp-m-Q4_K_M.gguf"];

    #[test]
    fn quants_match_whole_tokens() {
        assert!(holds_quant("gemma-3-270m-it-Q4_K_M.gguf", "q4_k_m"));
        assert!(holds_quant("model_q8_0.gguf", "Q8_0"));
        assert!(!holds_quant("m-Q4_K_M.gguf", "Q4_K"));
        assert!(!holds_quant("m-IQ4_XS.gguf", "Q4_XS"));
        assert!(holds_quant("UD-Q4_K_XL/m-UD-Q4_K_XL.gguf", "Q4_K_XL"));
    }

    #[test]
    fn gguf_choice() -> Result<()> {
        let r = RepoId::parse("o/n")?;
        assert_eq!(choose(&r, &GGUF_REPO, &Pick::Quant("q4_k_s".into()))?, Choice::Gguf("m-Q4_K_S.gguf".into()));
        assert_eq!(choose(&r, &GGUF_REPO, &Pick::Default)?, Choice::Gguf("m-Q4_K_M.gguf".into()));
        let missing = choose(&r, &GGUF_REPO, &Pick::Quant("Q8_0".into())).err().map(|e| e.to_string());
        assert_eq!(
            missing.as_deref(),
            Some("o/n: no GGUF file for quant \"Q8_0\"; choices: m-IQ4_XS.gguf, m-Q4_K_M.gguf, m-Q4_K_S.gguf")
        );
        let two = ["a-Q8_0.gguf", "b-Q8_0.gguf"];
        assert!(
            choose(&r, &two, &Pick::Quant("Q8_0".into())).err().is_some_and(|e| e.to_string().contains("ambiguous"))
        );
        assert!(choose(&r, &two, &Pick::Default).is_err());
        Ok(())
    }

    #[test]
    fn a_split_gguf_is_chosen_by_its_first_shard_and_brings_every_shard() -> Result<()> {
        let r = RepoId::parse("o/n")?;
        let names = [
            "m-Q4_K_M.gguf",
            "Q8_0/m-Q8_0-00001-of-00003.gguf",
            "Q8_0/m-Q8_0-00002-of-00003.gguf",
            "Q8_0/m-Q8_0-00003-of-00003.gguf",
        ];
        let first = "Q8_0/m-Q8_0-00001-of-00003.gguf";
        assert_eq!(choose(&r, &names, &Pick::Quant("Q8_0".into()))?, Choice::Gguf(first.into()));
        let set = gguf_set(&r, &names, first)?;
        assert_eq!(set, names[1..].iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(gguf_set(&r, &names, "m-Q4_K_M.gguf")?, vec!["m-Q4_K_M.gguf".to_string()]);
        let e = gguf_set(&r, &names[..3], first).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("lacks \"Q8_0/m-Q8_0-00003-of-00003.gguf\""), "{e}");
        // One split file alone in the repo is the default, by its first shard.
        assert_eq!(choose(&r, &names[1..], &Pick::Default)?, Choice::Gguf(first.into()));
        assert_eq!(split_of("a-00002-of-00002.gguf"), Some(("a", 2, 2)));
        assert_eq!((split_of("a-0002-of-00002.gguf"), split_of("a-00003-of-00002.gguf")), (None, None));
        Ok(())
    }

    #[test]
    fn checkpoint_choice() -> Result<()> {
        let r = RepoId::parse("o/n")?;
        let names = ["config.json", "tokenizer.json", INDEX, "a.safetensors", "b.safetensors", "README.md"];
        let c = choose(&r, &names, &Pick::Default)?;
        assert_eq!(
            c,
            Choice::Checkpoint {
                files: vec!["config.json".into(), "tokenizer.json".into(), INDEX.into()],
                sharded: true
            }
        );
        let ix =
            br#"{"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "a.safetensors"}}"#;
        assert_eq!(shards(&r, ix, &names)?, vec!["a.safetensors".to_string(), "b.safetensors".to_string()]);
        assert!(shards(&r, br#"{"weight_map": {"x": "../a.safetensors"}}"#, &names).is_err());
        assert!(shards(&r, br#"{"weight_map": {"x": "c.safetensors"}}"#, &names).is_err());
        Ok(())
    }
}
