//! A Hugging Face checkpoint's weights: `model.safetensors`, or shards named by
//! `model.safetensors.index.json`, confined to the checkpoint directory (a Hugging Face cache
//! snapshot's files may link into its repo's `blobs/`).

use crate::error::FormatError;
use crate::printable::show;
use crate::safetensors_file::{SafetensorsFile, TensorView};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tf_core::regular_file::{present, read_regular};

/// All tensors of a checkpoint directory, by name.
pub struct Checkpoint {
    files: Vec<SafetensorsFile>,
    index: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens the weights of the checkpoint directory `dir`.
    pub fn open(dir: &Path) -> Result<Checkpoint, FormatError> {
        let index_path = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let shard_names = if present(&index_path) {
            read_index(&index_path)?
        } else if present(&single) {
            BTreeMap::from([(String::new(), "model.safetensors".to_string())])
        } else {
            let mut found: Vec<String> = std::fs::read_dir(dir)
                .map_err(|source| FormatError::Io { path: dir.to_path_buf(), source })?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".safetensors"))
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(FormatError::header(dir, "no model.safetensors, no index, no *.safetensors file"));
            }
            found.into_iter().map(|n| (n.clone(), n)).collect()
        };
        let mut files = Vec::new();
        let mut file_of: HashMap<String, usize> = HashMap::new();
        let mut index = HashMap::new();
        for file_name in shard_names.values() {
            if file_of.contains_key(file_name) {
                continue;
            }
            let f = SafetensorsFile::open(&confined(dir, file_name, &index_path)?)?;
            for name in f.tensors().keys() {
                if let Some(prev) = index.insert(name.clone(), files.len()) {
                    let prev: &SafetensorsFile = &files[prev];
                    return Err(FormatError::tensor(f.path(), name, format!("also in {}", prev.path().display())));
                }
            }
            file_of.insert(file_name.clone(), files.len());
            files.push(f);
        }
        if present(&index_path) {
            for (name, file_name) in &shard_names {
                let idx = file_of.get(file_name).copied();
                if idx.is_none() || index.get(name) != idx.as_ref() {
                    return Err(FormatError::tensor(&index_path, name, format!("not found in {}", show(file_name))));
                }
            }
        }
        Ok(Checkpoint { files, index })
    }

    /// The named tensor, `None` when the checkpoint lacks it.
    pub fn get(&self, name: &str) -> Result<Option<TensorView>, FormatError> {
        match self.index.get(name) {
            Some(&i) => self.files[i].tensor(name),
            None => Ok(None),
        }
    }

    /// Whether the checkpoint has a tensor of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// All tensor names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    /// The shard files.
    pub fn files(&self) -> &[SafetensorsFile] {
        &self.files
    }
}

fn read_index(path: &Path) -> Result<BTreeMap<String, String>, FormatError> {
    let bytes = read_regular(path).map_err(|e| FormatError::opening(path, e))?;
    let root: Value =
        serde_json::from_slice(&bytes).map_err(|e| FormatError::header(path, format!("not JSON: {e}")))?;
    let map =
        root.get("weight_map").and_then(Value::as_object).ok_or_else(|| FormatError::header(path, "no weight_map"))?;
    map.iter()
        .map(|(k, v)| match v.as_str() {
            Some(f) => Ok((k.clone(), f.to_string())),
            None => Err(FormatError::tensor(path, k, "shard name is not a string")),
        })
        .collect()
}

/// `dir/name` when `name` is a plain file name that stays inside `dir`.
fn confined(dir: &Path, name: &str, index: &Path) -> Result<PathBuf, FormatError> {
    let plain = !name.is_empty() && !name.contains(['/', '\\']) && name != ".." && name != ".";
    if !plain {
        return Err(FormatError::header(index, format!("shard name '{}' is not a plain file name", show(name))));
    }
    let path = dir.join(name);
    let real = path.canonicalize().map_err(|source| FormatError::Io { path: path.clone(), source })?;
    let root = dir.canonicalize().map_err(|source| FormatError::Io { path: dir.to_path_buf(), source })?;
    if !real.starts_with(&root) && !real.starts_with(hub_blobs(&root).unwrap_or_else(|| root.clone())) {
        return Err(FormatError::header(
            index,
            format!("shard '{}' leads outside the checkpoint directory", show(name)),
        ));
    }
    Ok(path)
}

/// The blob folder of a Hugging Face cache snapshot (`REPO/snapshots/<commit>` links its files to
/// `REPO/blobs/<hash>`), when `root` is one.
fn hub_blobs(root: &Path) -> Option<PathBuf> {
    let snapshots = root.parent()?;
    if snapshots.file_name()? != "snapshots" {
        return None;
    }
    Some(snapshots.parent()?.join("blobs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_as_weights_or_index_is_refused_without_blocking() {
        for name in ["model.safetensors", "model.safetensors.index.json", "a.safetensors"] {
            let dir = tempfile::tempdir().unwrap();
            let fifo = dir.path().join(name);
            assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
            let (tx, rx) = std::sync::mpsc::channel();
            let d = dir.path().to_path_buf();
            std::thread::spawn(move || tx.send(Checkpoint::open(&d).err().map(|e| e.to_string())));
            let msg = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("opening a FIFO blocked");
            assert_eq!(msg, Some(format!("{}: not a regular file (it is a FIFO)", fifo.display())));
        }
    }

    #[test]
    fn shards_may_link_to_a_hub_caches_blobs_only() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("models--o--n");
        let snap = repo.join("snapshots").join("c0ffee");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::write(repo.join("blobs/abc"), b"x").unwrap();
        std::fs::write(repo.join("elsewhere"), b"x").unwrap();
        std::os::unix::fs::symlink("../../blobs/abc", snap.join("a.safetensors")).unwrap();
        std::os::unix::fs::symlink("../../elsewhere", snap.join("b.safetensors")).unwrap();
        let index = Path::new("index.json");
        assert!(confined(&snap, "a.safetensors", index).is_ok());
        let msg = confined(&snap, "b.safetensors", index).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("leads outside the checkpoint directory"), "{msg}");
    }
}
