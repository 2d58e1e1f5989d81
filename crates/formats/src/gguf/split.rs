//! Split GGUF files as llama.cpp's `gguf-split` writes them: shard `k` of `n` named
//! `PREFIX-0000k-of-0000n.gguf`, each a whole GGUF file with its own header and a part of the
//! tensors, the first holding the model's metadata, every one `split.no` (from 0), `split.count`
//! and (the first) `split.tensors.count`. Opened from the first shard; each later shard is
//! validated as any file is, must say its number and the count, and may hold no tensor another
//! shard holds.

use super::GgufFile;
use crate::error::FormatError;
use std::path::{Path, PathBuf};

/// Most shards a split file may have (llama.cpp counts them in a `u16`).
pub const MAX_SHARDS: u64 = 1024;

/// Brings the later shards of `f` when it is the first shard of a split file; a whole file is
/// left as it is, a later shard refused naming the first.
pub(super) fn join(f: &mut GgufFile) -> Result<(), FormatError> {
    let count = f.get_u64("split.count")?.unwrap_or(1);
    if count <= 1 {
        return Ok(());
    }
    let bad = |msg: String| FormatError::header(&f.path, msg);
    if count > MAX_SHARDS {
        return Err(bad(format!("split.count {count} is past the {MAX_SHARDS} shards a split file may have")));
    }
    let no = f.get_u64("split.no")?.unwrap_or(0);
    let Some(prefix) = prefix_of(&f.path, no, count) else {
        return Err(bad(format!(
            "shard {} of {count} of a split GGUF file must be named PREFIX-{:05}-of-{count:05}.gguf",
            no + 1,
            no + 1
        )));
    };
    if no != 0 {
        return Err(bad(format!(
            "is shard {} of {count}: open the first, {}",
            no + 1,
            shard_path(&prefix, 0, count).display()
        )));
    }
    for k in 1..count {
        let path = shard_path(&prefix, k, count);
        let g = GgufFile::open_one(&path)?;
        let wrong = |msg: String| FormatError::header(&path, msg);
        let (g_no, g_count) = (g.get_u64("split.no")?, g.get_u64("split.count")?);
        if (g_no, g_count) != (Some(k), Some(count)) {
            return Err(wrong(format!(
                "says split.no {g_no:?} of split.count {g_count:?}, expected shard {k} (from 0) of {count}"
            )));
        }
        let shard = f.shards.len() + 1;
        for t in g.header.tensors {
            if f.header.tensor_index.contains_key(&t.name) {
                return Err(wrong(format!("tensor '{}' is also in an earlier shard", t.name)));
            }
            f.header.tensor_index.insert(t.name.clone(), f.header.tensors.len());
            f.header.tensors.push(t);
            f.shard_of.push(shard);
        }
        f.shards.push((path, g.backing));
    }
    let total = f.header.tensors.len() as u64;
    match f.get_u64("split.tensors.count")? {
        Some(n) if n != total => Err(FormatError::header(
            &f.path,
            format!("split.tensors.count is {n}, but the {count} shards hold {total}"),
        )),
        _ => Ok(()),
    }
}

/// `PREFIX` of `PREFIX-{no + 1:05}-of-{count:05}.gguf`, when `path` is named so.
fn prefix_of(path: &Path, no: u64, count: u64) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(&format!("-{:05}-of-{count:05}.gguf", no + 1))?;
    Some(path.with_file_name(stem))
}

/// Shard `k`'s path (from 0) of the split file named by `prefix`.
fn shard_path(prefix: &Path, k: u64, count: u64) -> PathBuf {
    let name = prefix.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    prefix.with_file_name(format!("{name}-{:05}-of-{count:05}.gguf", k + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::writer::{GgufWriter, WriteValue};

    /// Shard `k` of `count`: metadata in the first, tensors `names`, each 4 f32 values `k`.
    fn shard(k: u16, count: u16, names: &[&str], total: i32) -> Vec<u8> {
        let mut w = GgufWriter::new();
        if k == 0 {
            w.kv("general.architecture", WriteValue::str("llama"));
            w.kv("split.tensors.count", WriteValue::I32(total));
        }
        w.kv("split.no", WriteValue::U16(k));
        w.kv("split.count", WriteValue::U16(count));
        for n in names {
            w.f32_tensor(n, &[4], &[f32::from(k); 4]);
        }
        w.to_bytes()
    }

    fn write(dir: &Path, files: &[(&str, Vec<u8>)]) {
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("write");
        }
    }

    #[test]
    fn the_first_shard_brings_the_others_tensors_from_their_own_files() {
        let dir = tempfile::tempdir().expect("dir");
        write(
            dir.path(),
            &[
                ("m-00001-of-00003.gguf", shard(0, 3, &["a"], 4)),
                ("m-00002-of-00003.gguf", shard(1, 3, &["b", "c"], 0)),
                ("m-00003-of-00003.gguf", shard(2, 3, &["d"], 0)),
            ],
        );
        let f = GgufFile::open(&dir.path().join("m-00001-of-00003.gguf")).expect("opens");
        assert_eq!(f.architecture().expect("arch"), "llama");
        let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        for (name, k) in [("a", 0.0), ("c", 1.0), ("d", 2.0)] {
            let t = f.tensor(name).expect("ok").expect("there");
            assert_eq!(
                (
                    t.to_f32(),
                    t.file.file_name().and_then(|n| n.to_str()).map(|n| n.contains(&format!("0000{}", k as u8 + 1)))
                ),
                (vec![k; 4], Some(true))
            );
            assert_eq!(f.tensor_data(f.tensor_info(name).expect("info")), t.data.as_bytes());
        }
        assert_eq!(f.shard_paths().count(), 2);
    }

    #[test]
    fn a_later_shard_a_missing_or_mislabelled_one_duplicates_and_wrong_counts_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let first = dir.path().join("m-00001-of-00002.gguf");
        let open = || GgufFile::open(&first).err().map(|e| e.to_string()).unwrap_or_default();
        write(dir.path(), &[("m-00001-of-00002.gguf", shard(0, 2, &["a"], 2))]);
        assert!(open().contains("m-00002-of-00002.gguf"), "{}", open());
        write(dir.path(), &[("m-00002-of-00002.gguf", shard(0, 2, &["b"], 0))]);
        assert!(open().contains("expected shard 1 (from 0) of 2"), "{}", open());
        write(dir.path(), &[("m-00002-of-00002.gguf", shard(1, 2, &["a"], 0))]);
        assert!(open().contains("tensor 'a' is also in an earlier shard"), "{}", open());
        write(dir.path(), &[("m-00002-of-00002.gguf", shard(1, 2, &["b", "c"], 0))]);
        assert!(open().contains("split.tensors.count is 2, but the 2 shards hold 3"), "{}", open());
        write(dir.path(), &[("m-00002-of-00002.gguf", shard(1, 2, &["b"], 0))]);
        assert!(GgufFile::open(&first).is_ok());
        let later = GgufFile::open(&dir.path().join("m-00002-of-00002.gguf")).err().map(|e| e.to_string());
        assert!(
            later.is_some_and(|e| e.contains("is shard 2 of 2: open the first") && e.contains("m-00001-of-00002.gguf"))
        );
        write(dir.path(), &[("renamed.gguf", shard(0, 2, &["a"], 2))]);
        let e = GgufFile::open(&dir.path().join("renamed.gguf")).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("must be named PREFIX-00001-of-00002.gguf"), "{e}");
        // Taken from bytes, a shard is read alone.
        assert_eq!(GgufFile::from_bytes(&first, shard(0, 2, &["a"], 2)).expect("alone").tensors().len(), 1);
    }
}
