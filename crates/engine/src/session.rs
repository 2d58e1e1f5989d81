//! Saved sessions: a sequence's token ids and the K/V of its full blocks in a file, restored
//! later into the prefix cache so that a prompt extending it is served exactly as a fresh one.
//! A session file is outside input: every field is checked against the running model (magic,
//! version, fingerprint, KV layout, length within capacity, ids below the embedding rows, exact
//! file size) before any of it reaches the engine; names are confined to one directory.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use tf_backend::Backend;
use tf_core::{DType, TokenIds, Vocab};
use tf_models::Model;
use thiserror::Error;

/// First bytes of every session file.
pub const MAGIC: &[u8; 8] = b"TFSESS\0\x01";
/// Format version written and accepted.
pub const VERSION: u32 = 1;
/// Bytes before the ids: magic, version, fingerprint, dtype, 4 dims, token count.
const HEADER: usize = 8 + 4 + 8 + 1 + 4 * 4 + 8;

/// A session file was refused.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The name could escape the session directory or is not a plain name.
    #[error("session name '{0}' must be 1-64 characters of [A-Za-z0-9_-]")]
    BadName(String),
    /// The path is a symbolic link.
    #[error("session '{0}' is a symbolic link")]
    Symlink(String),
    /// Reading or writing failed.
    #[error("session '{path}': {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The contents disagree with the running model or are malformed.
    #[error("session '{path}': {msg}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        msg: String,
    },
}

/// What a session must match: the model and its KV pool's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLayout {
    /// The model's fingerprint.
    pub fingerprint: u64,
    /// KV element type.
    pub kv_dtype: DType,
    /// Layers.
    pub num_layers: usize,
    /// KV heads.
    pub num_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Most tokens a session may hold (pool and context).
    pub max_tokens: usize,
    /// The embedding rows.
    pub vocab: Vocab,
}

/// A validated session: ids and, per layer, the K then V bytes of its blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedSession {
    /// Token ids (a whole number of blocks).
    pub ids: TokenIds,
    /// Per layer: K of every block, then V of every block.
    pub layers: Vec<Vec<u8>>,
}

/// What a session file's header says, checked for consistency but not against a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionHeader {
    /// The fingerprint of the model that saved it.
    pub fingerprint: u64,
    /// KV element type.
    pub kv_dtype: DType,
    /// Layers.
    pub num_layers: usize,
    /// KV heads.
    pub num_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Tokens saved (a whole number of blocks).
    pub num_tokens: usize,
}

impl SessionLayout {
    /// The layout of `model`'s KV pool in `block_size`-token blocks of `kv_dtype`, sessions of at
    /// most `max_tokens`.
    pub fn of<B: Backend>(model: &Model<B>, kv_dtype: DType, block_size: usize, max_tokens: usize) -> SessionLayout {
        let spec = &model.decoder.spec;
        SessionLayout {
            fingerprint: model.fingerprint,
            kv_dtype,
            num_layers: spec.num_layers,
            num_kv_heads: spec.num_kv_heads,
            head_dim: spec.head_dim,
            block_size,
            max_tokens,
            vocab: model.vocab,
        }
    }

    /// Bytes of K (or V) of one block of one layer.
    pub fn half_block_bytes(&self) -> usize {
        self.block_size * self.num_kv_heads * self.head_dim * self.kv_dtype.size()
    }

    fn dtype_code(&self) -> u8 {
        match self.kv_dtype {
            DType::F32 => 1,
            DType::F16 => 2,
            DType::BF16 => 3,
            _ => 0,
        }
    }
}

/// The KV dtype a header byte names.
fn dtype_of(code: u8) -> Option<DType> {
    match code {
        1 => Some(DType::F32),
        2 => Some(DType::F16),
        3 => Some(DType::BF16),
        _ => None,
    }
}

/// `dir/name.tfsession` when `name` is a plain name (no `..`, separators or absolute paths).
pub fn confined_path(dir: &Path, name: &str) -> Result<PathBuf, SessionError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        return Err(SessionError::BadName(name.chars().take(80).collect()));
    }
    Ok(dir.join(format!("{name}.tfsession")))
}

/// Writes a session file atomically (temp file, then rename).
pub fn write(path: &Path, layout: &SessionLayout, session: &CheckedSession) -> Result<(), SessionError> {
    let io = |source| SessionError::Io { path: path.display().to_string(), source };
    let mut buf = Vec::with_capacity(HEADER + session.ids.len() * 4);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&layout.fingerprint.to_le_bytes());
    buf.push(layout.dtype_code());
    for d in [layout.num_layers, layout.num_kv_heads, layout.head_dim, layout.block_size] {
        buf.extend_from_slice(&(d as u32).to_le_bytes());
    }
    buf.extend_from_slice(&(session.ids.len() as u64).to_le_bytes());
    buf.extend(session.ids.as_slice().iter().flat_map(|id| id.to_le_bytes()));
    let tmp = path.with_extension("tfsession.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&buf).map_err(io)?;
    for layer in &session.layers {
        f.write_all(layer).map_err(io)?;
    }
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// A header's fields as stored (magic and version already checked).
struct RawHeader {
    fingerprint: u64,
    dtype_code: u8,
    /// Layers, KV heads, head width, block size.
    dims: [u64; 4],
    num_tokens: u64,
}

/// Opens a session file (refusing symlinks) and reads its header, checking magic and version;
/// returns the file positioned after the header and its length.
fn open_header(path: &Path) -> Result<(std::fs::File, u64, RawHeader), SessionError> {
    let name = path.display().to_string();
    let io = |source| SessionError::Io { path: name.clone(), source };
    let bad = |msg: String| SessionError::Invalid { path: name.clone(), msg };
    if std::fs::symlink_metadata(path).map_err(io)?.file_type().is_symlink() {
        return Err(SessionError::Symlink(name.clone()));
    }
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut head = [0u8; HEADER];
    f.read_exact(&mut head).map_err(|_| bad(format!("{len} bytes is shorter than the header")))?;
    let u32_at = |i: usize| u64::from(u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]));
    let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap_or([0; 8]));
    if &head[..8] != MAGIC {
        return Err(bad("not a TensorFold session file (bad magic)".into()));
    }
    if u32_at(8) != u64::from(VERSION) {
        return Err(bad(format!("format version {} (this build reads {VERSION})", u32_at(8))));
    }
    let dims = [u32_at(21), u32_at(25), u32_at(29), u32_at(33)];
    Ok((f, len, RawHeader { fingerprint: u64_at(12), dtype_code: head[20], dims, num_tokens: u64_at(37) }))
}

/// Reads a session file's header and checks the file against itself: magic, version, a known
/// dtype, non-zero dimensions, a whole number of blocks and the exact size those imply.
pub fn inspect(path: &Path) -> Result<SessionHeader, SessionError> {
    let bad = |msg: String| SessionError::Invalid { path: path.display().to_string(), msg };
    let (_, len, h) = open_header(path)?;
    let kv_dtype = dtype_of(h.dtype_code).ok_or_else(|| bad(format!("unknown KV dtype code {}", h.dtype_code)))?;
    let [num_layers, num_kv_heads, head_dim, block_size] = h.dims;
    if h.dims.contains(&0) {
        return Err(bad(format!("KV layout {:?} has a zero dimension", h.dims)));
    }
    let n = h.num_tokens;
    if n == 0 || !n.is_multiple_of(block_size) {
        return Err(bad(format!("{n} tokens: must be a positive multiple of the block size {block_size}")));
    }
    let factors = [2, n / block_size, block_size, num_kv_heads, head_dim, kv_dtype.size() as u64, num_layers];
    let expected = factors
        .iter()
        .try_fold(1u64, |acc, &x| acc.checked_mul(x))
        .and_then(|kv| kv.checked_add(n.checked_mul(4)?)?.checked_add(HEADER as u64))
        .ok_or_else(|| bad(format!("{n} tokens of this layout overflow any file size")))?;
    if len != expected {
        return Err(bad(format!("file is {len} bytes, expected {expected} (truncated or padded)")));
    }
    let size = |x: u64| usize::try_from(x).map_err(|_| bad(format!("{x} does not fit this machine")));
    Ok(SessionHeader {
        fingerprint: h.fingerprint,
        kv_dtype,
        num_layers: size(num_layers)?,
        num_kv_heads: size(num_kv_heads)?,
        head_dim: size(head_dim)?,
        block_size: size(block_size)?,
        num_tokens: size(n)?,
    })
}

/// Reads and checks a session file against `layout`.
pub fn read(path: &Path, layout: &SessionLayout) -> Result<CheckedSession, SessionError> {
    let name = path.display().to_string();
    let io = |source| SessionError::Io { path: name.clone(), source };
    let bad = |msg: String| SessionError::Invalid { path: name.clone(), msg };
    let (mut f, len, h) = open_header(path)?;
    if h.fingerprint != layout.fingerprint {
        return Err(bad("saved from another model (fingerprint differs)".into()));
    }
    let want = [layout.num_layers, layout.num_kv_heads, layout.head_dim, layout.block_size].map(|d| d as u64);
    if h.dtype_code != layout.dtype_code() || h.dims != want {
        return Err(bad(format!("KV layout {:?} dtype {} differs from the running {want:?}", h.dims, h.dtype_code)));
    }
    let n = h.num_tokens;
    if n == 0 || n > layout.max_tokens as u64 || !n.is_multiple_of(layout.block_size as u64) {
        return Err(bad(format!(
            "{n} tokens: must be a positive multiple of {} and at most {}",
            layout.block_size, layout.max_tokens
        )));
    }
    let n = n as usize;
    let per_layer = 2 * (n / layout.block_size) * layout.half_block_bytes();
    let expected = (HEADER + 4 * n + layout.num_layers * per_layer) as u64;
    if len != expected {
        return Err(bad(format!("file is {len} bytes, expected {expected} (truncated or padded)")));
    }
    let mut raw = vec![0u8; 4 * n];
    f.read_exact(&mut raw).map_err(io)?;
    let ids: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let ids = layout.vocab.check_u32(&ids).map_err(|e| bad(e.to_string()))?;
    let mut layers = Vec::with_capacity(layout.num_layers);
    for _ in 0..layout.num_layers {
        let mut data = vec![0u8; per_layer];
        f.read_exact(&mut data).map_err(io)?;
        layers.push(data);
    }
    Ok(CheckedSession { ids, layers })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> SessionLayout {
        SessionLayout {
            fingerprint: 42,
            kv_dtype: DType::F32,
            num_layers: 2,
            num_kv_heads: 1,
            head_dim: 2,
            block_size: 2,
            max_tokens: 8,
            vocab: Vocab::new(10).unwrap(),
        }
    }

    fn session(l: &SessionLayout) -> CheckedSession {
        let per_layer = 2 * 2 * l.half_block_bytes();
        CheckedSession {
            ids: l.vocab.check(&[1, 2, 3, 4]).unwrap(),
            layers: (0..2).map(|i| (0..per_layer).map(|b| (b + i) as u8).collect()).collect(),
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout();
        let p = confined_path(dir.path(), "chat_1").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        assert_eq!(read(&p, &l).unwrap(), session(&l));
        let other = SessionLayout { fingerprint: 7, ..l };
        assert!(read(&p, &other).unwrap_err().to_string().contains("another model"));
        let small = SessionLayout { max_tokens: 2, ..l };
        assert!(read(&p, &small).unwrap_err().to_string().contains("at most 2"));
        let narrow = SessionLayout { vocab: Vocab::new(4).unwrap(), ..l };
        assert!(read(&p, &narrow).unwrap_err().to_string().contains("outside the vocabulary"));
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        assert!(read(&p, &l).unwrap_err().to_string().contains("truncated"));
        std::fs::write(&p, b"hello").unwrap();
        assert!(read(&p, &l).is_err());
        for name in ["..", "../x", "/etc/passwd", "a/b", "", "x.y", &"a".repeat(65)] {
            assert!(confined_path(dir.path(), name).is_err(), "{name}");
        }
    }

    #[test]
    fn inspect_reads_the_header_and_refuses_inconsistent_files() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout();
        let p = confined_path(dir.path(), "chat").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        let h = inspect(&p).unwrap();
        let want = SessionHeader {
            fingerprint: 42,
            kv_dtype: DType::F32,
            num_layers: 2,
            num_kv_heads: 1,
            head_dim: 2,
            block_size: 2,
            num_tokens: 4,
        };
        assert_eq!(h, want);
        let bytes = std::fs::read(&p).unwrap();
        let refuse = |data: &[u8], needle: &str| {
            std::fs::write(&p, data).unwrap();
            let err = inspect(&p).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        };
        refuse(&bytes[..bytes.len() - 1], "truncated");
        refuse(&bytes[..10], "shorter than the header");
        refuse(b"not a session file at all, but long enough to hold a header", "bad magic");
        let mut dtype = bytes.clone();
        dtype[20] = 9;
        refuse(&dtype, "dtype code 9");
        let mut zero = bytes.clone();
        zero[25..29].copy_from_slice(&0u32.to_le_bytes());
        refuse(&zero, "zero dimension");
        let mut odd = bytes.clone();
        odd[37..45].copy_from_slice(&3u64.to_le_bytes());
        refuse(&odd, "multiple of the block size");
        let mut huge = bytes.clone();
        huge[21..37].copy_from_slice(&[0xff; 16]);
        huge[37..45].copy_from_slice(&(u64::MAX - u64::from(u32::MAX)).to_le_bytes());
        refuse(&huge, "overflow");
    }

    #[test]
    fn symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout();
        let real = dir.path().join("real.bin");
        write(&real, &l, &session(&l)).unwrap();
        let link = confined_path(dir.path(), "link").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(read(&link, &l), Err(SessionError::Symlink(_))));
    }
}
