//! Saved sessions: a sequence's token ids, the K/V of its full blocks and (models with
//! recurrent layers) every state layer's slot after its last token in a file, restored later
//! into the prefix cache (the state as the snapshot of its last block) so that a prompt
//! extending it is served exactly as a fresh one.
//! A session file is outside input: it is opened without following links and read only when it
//! is a regular file, and every byte is checked ([`verify`]: header, exact size, SHA-256 of the
//! payload, finite K/V and state, ids below the embedding rows, KV slot widths and state shapes
//! equal to the model's) before any of it reaches the engine; names
//! are confined to one directory and files are replaced through an exclusive temporary.

mod verify;

use std::io::Write;
use std::path::{Path, PathBuf};
use tf_backend::{Backend, StateShape};
use tf_core::safe_file::{self, SafeFileError};
use tf_core::{DType, TokenIds, Vocab};
use tf_models::tp::RankPools;
use tf_models::{Model, ModelError};
use thiserror::Error;
pub use verify::verify;
use verify::{digest_of, dtype_code};

/// First bytes of every session file.
pub const MAGIC: &[u8; 8] = b"TFSESS\0\x01";
/// Format version written and accepted (2: the header carries the payload's SHA-256; 3: and
/// the state layers' shapes and slots; 4: the model fingerprint covers every byte of every
/// tensor, where version 3's sampled only both ends of each; 5: each KV layer's slot width in a
/// table after the state table, so pools of several widths (Gemma 4) are saved).
pub const VERSION: u32 = 5;
/// Where the SHA-256 starts: after magic, version, fingerprint, dtype, 4 dims, token count,
/// state layer count.
const DIGEST_AT: usize = 8 + 4 + 8 + 1 + 4 * 4 + 8 + 4;
/// Bytes of one state layer's shape in the table after the ids (conv channels, conv width,
/// recurrent values: u32 each).
pub const STATE_SHAPE_BYTES: usize = 12;
/// Bytes of one KV layer's slot width in the table after the state table (u32).
pub const KV_WIDTH_BYTES: usize = 4;
/// Most KV layers a session file may name.
pub const MAX_KV_LAYERS: usize = 4096;
/// Most state layers a session file may name.
pub const MAX_STATE_LAYERS: usize = 4096;
/// Bytes before the ids: the fields above and the 32-byte digest.
pub const HEADER: usize = DIGEST_AT + 32;

/// A session file was refused.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The name could escape the session directory or is not a plain name.
    #[error("session name '{0}' must be 1-64 characters of [A-Za-z0-9_-]")]
    BadName(String),
    /// The file, or the folder holding it, is a symbolic link.
    #[error("session '{0}' is a symbolic link (refused)")]
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

/// What a session must match: the model and its KV and state pools' layout. Under tensor
/// parallelism the pools are every rank's in rank order (rank 0's KV pools, rank 1's, ...; the
/// same for the state), each rank's part of every head it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLayout {
    /// The model's fingerprint.
    pub fingerprint: u64,
    /// KV element type.
    pub kv_dtype: DType,
    /// Tensor-parallel ranks whose pools the session holds (1 unsharded).
    pub ranks: usize,
    /// Each KV pool's slot width (`KV heads * head width`), in the order of the model's pools
    /// (every rank's, in rank order).
    pub kv_widths: Vec<usize>,
    /// Tokens per block.
    pub block_size: usize,
    /// Most tokens a session may hold (pool and context).
    pub max_tokens: usize,
    /// The embedding rows.
    pub vocab: Vocab,
    /// Each state layer's slot shape (`num_slots` 1), in layer order (every rank's).
    pub state: Vec<StateShape>,
}

/// A validated session: ids, per attention layer the K then V bytes of its blocks, and per
/// state layer its slot after the last token.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedSession {
    /// Token ids (a whole number of blocks).
    pub ids: TokenIds,
    /// Per attention layer: K of every block, then V of every block.
    pub layers: Vec<Vec<u8>>,
    /// Per state layer: one slot's f32 values as little-endian bytes.
    pub state: Vec<Vec<u8>>,
}

/// What a session file's header says, checked for consistency but not against a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// The fingerprint of the model that saved it.
    pub fingerprint: u64,
    /// KV element type.
    pub kv_dtype: DType,
    /// Tensor-parallel ranks that saved it (their pools in rank order).
    pub ranks: usize,
    /// Each KV layer's slot width (from the table after the state table).
    pub kv_widths: Vec<usize>,
    /// Tokens per block.
    pub block_size: usize,
    /// Tokens saved (a whole number of blocks).
    pub num_tokens: usize,
    /// SHA-256 of every other byte of the file (checked).
    pub digest: [u8; 32],
    /// Each state layer's slot shape (from the table after the ids), in layer order.
    pub state: Vec<StateShape>,
}

impl SessionLayout {
    /// The layout of `model`'s pools on `backend` (every rank's, sharded) in `block_size`-token
    /// blocks, sessions of at most `max_tokens`.
    pub fn of<B: Backend>(
        model: &Model<B>,
        backend: &B,
        block_size: usize,
        max_tokens: usize,
    ) -> Result<SessionLayout, ModelError> {
        let pools = model.decoder.rank_pools(backend)?;
        Ok(SessionLayout::of_pools(model, backend.kv_dtype(), &pools, block_size, max_tokens))
    }

    /// The layout of `model` over ranks holding `pools` (rank order) of `kv_dtype`.
    pub fn of_pools<B: Backend>(
        model: &Model<B>,
        kv_dtype: DType,
        pools: &[RankPools],
        block_size: usize,
        max_tokens: usize,
    ) -> SessionLayout {
        SessionLayout {
            fingerprint: model.fingerprint,
            kv_dtype,
            ranks: pools.len(),
            kv_widths: pools.iter().flat_map(|p| p.kv_widths.iter().copied()).collect(),
            block_size,
            max_tokens,
            vocab: model.vocab,
            state: pools.iter().flat_map(|p| p.state.iter().copied()).collect(),
        }
    }

    /// KV pools of one rank.
    pub fn kv_per_rank(&self) -> usize {
        self.kv_widths.len() / self.ranks.max(1)
    }

    /// State pools of one rank.
    pub fn state_per_rank(&self) -> usize {
        self.state.len() / self.ranks.max(1)
    }

    /// Bytes of K (or V) of one block of KV layer `layer`.
    pub fn half_block_bytes(&self, layer: usize) -> usize {
        self.kv_dtype.kv_bytes(self.block_size * self.kv_widths.get(layer).copied().unwrap_or(0))
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

/// The header fields before the digest.
fn header_fields(layout: &SessionLayout, num_tokens: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    head.extend_from_slice(&layout.fingerprint.to_le_bytes());
    head.push(dtype_code(layout.kv_dtype));
    // The dims field's middle two: the first pool's slot width (the widths' table after the state
    // table has every layer's) and the ranks.
    let first = layout.kv_widths.first().copied().unwrap_or(0);
    for d in [layout.kv_widths.len(), first, layout.ranks, layout.block_size] {
        head.extend_from_slice(&(d as u32).to_le_bytes());
    }
    head.extend_from_slice(&(num_tokens as u64).to_le_bytes());
    head.extend_from_slice(&(layout.state.len() as u32).to_le_bytes());
    head
}

/// The state shape table: each state layer's conv channels, conv width and recurrent values.
fn state_table(state: &[StateShape]) -> Vec<u8> {
    state
        .iter()
        .flat_map(|s| [s.conv_channels, s.conv_width, s.rec_len])
        .flat_map(|d| (d as u32).to_le_bytes())
        .collect()
}

/// The KV width table: each KV layer's slot width.
fn width_table(widths: &[usize]) -> Vec<u8> {
    widths.iter().flat_map(|&w| (w as u32).to_le_bytes()).collect()
}

/// Writes a session file: through an exclusive temporary beside it, synced, renamed over it
/// (never following a link at the target, the temporary or the folder).
pub fn write(path: &Path, layout: &SessionLayout, session: &CheckedSession) -> Result<(), SessionError> {
    let ids: Vec<u8> = session.ids.as_slice().iter().flat_map(|id| id.to_le_bytes()).collect();
    let mut head = header_fields(layout, session.ids.len());
    let table = state_table(&layout.state);
    let widths = width_table(&layout.kv_widths);
    let parts: Vec<&[u8]> = [ids.as_slice(), table.as_slice(), widths.as_slice()]
        .into_iter()
        .chain(session.layers.iter().map(Vec::as_slice))
        .chain(session.state.iter().map(Vec::as_slice))
        .collect();
    head.extend_from_slice(&digest_of(&head, &parts));
    let shown = path.display().to_string();
    safe_file::write_atomic(path, |f| {
        f.write_all(&head)?;
        parts.iter().try_for_each(|p| f.write_all(p))
    })
    .map_err(|e| named(e, &shown))
}

/// Recomputes the digest of session file bytes in place (for tools and tests that build or edit
/// files by hand); bytes shorter than a header are left alone.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() >= HEADER {
        let (head, payload) = bytes.split_at_mut(HEADER);
        let digest = digest_of(head, &[payload]);
        head[DIGEST_AT..].copy_from_slice(&digest);
    }
}

/// A safe-file error as a session error (a file that is not regular is invalid, naming `shown`).
fn named(e: SafeFileError, shown: &str) -> SessionError {
    match e {
        SafeFileError::Symlink(path) => SessionError::Symlink(path),
        SafeFileError::Io { path, source } => SessionError::Io { path, source },
        other @ (SafeFileError::NotRegular { .. } | SafeFileError::BadPath(_)) => {
            SessionError::Invalid { path: shown.to_string(), msg: other.to_string() }
        }
    }
}

/// Opens `path` safely and runs [`verify`] over it.
fn open_and_verify(
    path: &Path,
    against: Option<&SessionLayout>,
) -> Result<(SessionHeader, Option<CheckedSession>), SessionError> {
    let shown = path.display().to_string();
    let f = safe_file::open_read(path).map_err(|e| named(e, &shown))?;
    let len = f.metadata().map_err(|source| SessionError::Io { path: shown.clone(), source })?.len();
    verify(std::io::BufReader::with_capacity(1 << 20, f), len, &shown, against)
}

/// Checks a session file on its own (everything [`verify`] checks but the model) and returns
/// its header.
pub fn inspect(path: &Path) -> Result<SessionHeader, SessionError> {
    open_and_verify(path, None).map(|(h, _)| h)
}

/// Reads and checks a session file against `layout`.
pub fn read(path: &Path, layout: &SessionLayout) -> Result<CheckedSession, SessionError> {
    let shown = path.display().to_string();
    let (_, s) = open_and_verify(path, Some(layout))?;
    s.ok_or_else(|| SessionError::Invalid { path: shown, msg: "no contents were checked".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> SessionLayout {
        SessionLayout {
            fingerprint: 42,
            kv_dtype: DType::F32,
            ranks: 1,
            kv_widths: vec![2, 2],
            block_size: 2,
            max_tokens: 8,
            vocab: Vocab::new(10).unwrap(),
            state: Vec::new(),
        }
    }

    fn session(l: &SessionLayout) -> CheckedSession {
        CheckedSession {
            ids: l.vocab.check(&[1, 2, 3, 4]).unwrap(),
            layers: (0..l.kv_widths.len())
                .map(|i| (0..2 * 2 * l.half_block_bytes(i)).map(|b| (b + i) as u8).collect())
                .collect(),
            state: l
                .state
                .iter()
                .map(|s| (0..s.slot_len()).flat_map(|v| (v as f32 * 0.25).to_le_bytes()).collect())
                .collect(),
        }
    }

    /// Two state layers: a conv window with recurrent values, and recurrent values only.
    fn with_state() -> SessionLayout {
        let conv = StateShape { num_slots: 1, conv_channels: 3, conv_width: 2, rec_len: 4 };
        let rec = StateShape { num_slots: 1, conv_channels: 0, conv_width: 0, rec_len: 5 };
        SessionLayout { state: vec![conv, rec], ..layout() }
    }

    #[test]
    fn state_layers_round_trip_and_a_session_that_does_not_fit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let l = with_state();
        let p = confined_path(dir.path(), "hybrid").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        assert_eq!(read(&p, &l).unwrap(), session(&l));
        assert_eq!(inspect(&p).unwrap().state, l.state);
        let mut wider = l.clone();
        wider.state[1].rec_len = 6;
        assert!(read(&p, &wider).unwrap_err().to_string().contains("state layer shapes"));
        let fewer = SessionLayout { state: l.state[..1].to_vec(), ..l.clone() };
        assert!(read(&p, &fewer).unwrap_err().to_string().contains("2 state layers, the running model has 1"));
        assert!(read(&p, &layout()).is_err(), "a model without state refuses it");
        let bytes = std::fs::read(&p).unwrap();
        let mut nan = bytes.clone();
        let at = nan.len() - 8;
        nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        reseal(&mut nan);
        let (r, i) = refusals(&p, &nan, &l);
        assert!(r.contains("non-finite state value") && r.contains("state layer 1"), "{r}");
        assert_eq!(r, i);
        let mut huge = bytes.clone();
        huge[45..49].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut huge);
        assert!(refusals(&p, &huge, &l).1.contains("state layers: at most"));
        let mut short = bytes.clone();
        short.truncate(short.len() - 4);
        assert!(refusals(&p, &short, &l).1.contains("truncated or padded"));
    }

    #[test]
    fn round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout();
        let p = confined_path(dir.path(), "chat_1").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        assert_eq!(read(&p, &l).unwrap(), session(&l));
        let other = SessionLayout { fingerprint: 7, ..l.clone() };
        assert!(read(&p, &other).unwrap_err().to_string().contains("another model"));
        let small = SessionLayout { max_tokens: 2, ..l.clone() };
        assert!(read(&p, &small).unwrap_err().to_string().contains("at most 2"));
        let narrow = SessionLayout { vocab: Vocab::new(4).unwrap(), ..l.clone() };
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
            ranks: 1,
            kv_widths: vec![2, 2],
            block_size: 2,
            num_tokens: 4,
            digest: h.digest,
            state: Vec::new(),
        };
        assert_eq!(h, want);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(h.digest[..], bytes[DIGEST_AT..HEADER]);
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
        huge[25..37].copy_from_slice(&[0xff; 12]);
        huge[37..45].copy_from_slice(&(u64::MAX - u64::from(u32::MAX)).to_le_bytes());
        refuse(&huge, "overflow");
        let mut layers = bytes.clone();
        layers[21..25].copy_from_slice(&u32::MAX.to_le_bytes());
        refuse(&layers, "4294967295 KV layers: at most 4096");
        // The width table disagreeing with the header's first layer, or naming a zero width.
        let widths = HEADER + 16;
        let mut first = bytes.clone();
        first[widths..widths + 4].copy_from_slice(&3u32.to_le_bytes());
        reseal(&mut first);
        refuse(&first, "disagrees with the width table's 3");
        let mut zero_width = bytes.clone();
        zero_width[widths + 4..widths + 8].fill(0);
        reseal(&mut zero_width);
        refuse(&zero_width, "KV layer 1 has a slot width of 0");
    }

    #[test]
    fn pools_of_several_widths_round_trip_and_other_widths_are_refused() {
        // Gemma 4's shape: sliding layers narrower than the full one.
        let dir = tempfile::tempdir().unwrap();
        let l = SessionLayout { kv_widths: vec![2, 6, 2], ..layout() };
        let p = confined_path(dir.path(), "mixed").unwrap();
        let s = session(&l);
        assert_eq!(s.layers.iter().map(Vec::len).collect::<Vec<_>>(), [64, 192, 64]);
        write(&p, &l, &s).unwrap();
        assert_eq!(read(&p, &l).unwrap(), s);
        assert_eq!(inspect(&p).unwrap().kv_widths, [2, 6, 2]);
        let other = SessionLayout { kv_widths: vec![2, 2, 6], ..layout() };
        let e = read(&p, &other).unwrap_err().to_string();
        assert!(e.contains("KV slot widths [2, 6, 2] differ from the running [2, 2, 6]"), "{e}");
        let fewer = SessionLayout { kv_widths: vec![2, 6], ..layout() };
        let e = read(&p, &fewer).unwrap_err().to_string();
        assert!(e.contains("3 layers") && e.contains("2 layers"), "{e}");
    }

    #[test]
    fn every_ranks_pools_round_trip_and_another_rank_count_is_refused_by_name() {
        // Two ranks, each with two KV pools and one state pool: the ranks' pools in rank order.
        let dir = tempfile::tempdir().unwrap();
        let one = with_state();
        let two = SessionLayout {
            ranks: 2,
            kv_widths: [one.kv_widths.clone(), one.kv_widths.clone()].concat(),
            state: vec![one.state[0]; 2],
            ..one.clone()
        };
        let single = SessionLayout { state: vec![one.state[0]], ..one.clone() };
        assert_eq!((two.kv_per_rank(), two.state_per_rank()), (2, 1));
        let p = confined_path(dir.path(), "sharded").unwrap();
        write(&p, &two, &session(&two)).unwrap();
        assert_eq!(read(&p, &two).unwrap(), session(&two));
        assert_eq!(inspect(&p).unwrap().ranks, 2);
        let e = read(&p, &single).unwrap_err().to_string();
        assert!(e.contains("saved by 2 tensor-parallel rank(s)") && e.contains("--tensor-parallel-size 2"), "{e}");
        // A file of one rank is refused by a sharded model alike.
        write(&p, &single, &session(&single)).unwrap();
        let sharded = SessionLayout { kv_widths: one.kv_widths.clone(), ..two.clone() };
        let e = read(&p, &sharded).unwrap_err().to_string();
        assert!(e.contains("saved by 1 tensor-parallel rank(s)") && e.contains("runs on 2"), "{e}");
        // Ranks that do not split the layers evenly.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[29..33].copy_from_slice(&2u32.to_le_bytes());
        let (_, inspected) = refusals(&p, &bytes, &single);
        assert!(inspected.contains("2 KV and 1 state layers do not split over 2 ranks"), "{inspected}");
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

    /// What `read` and `inspect` say of `data` written to `p`: both must refuse it alike.
    fn refusals(p: &Path, data: &[u8], l: &SessionLayout) -> (String, String) {
        std::fs::write(p, data).unwrap();
        (read(p, l).unwrap_err().to_string(), inspect(p).unwrap_err().to_string())
    }

    #[test]
    fn a_corrupted_payload_is_refused_by_read_and_inspect() {
        let dir = tempfile::tempdir().unwrap();
        let l = SessionLayout { kv_widths: vec![32, 32], ..layout() };
        let p = confined_path(dir.path(), "c").unwrap();
        let per_layer = 2 * 2 * l.half_block_bytes(0);
        let layers = (0..2).map(|i| (0..per_layer).map(|b| ((b * 7 + i) % 61) as u8).collect()).collect();
        let s = CheckedSession { ids: l.vocab.check(&[1, 2, 3, 4]).unwrap(), layers, state: Vec::new() };
        write(&p, &l, &s).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(read(&p, &l).unwrap(), s);
        let (len, kv) = (bytes.len(), HEADER + 16 + 2 * KV_WIDTH_BYTES);
        let mut flipped = bytes.clone();
        flipped[len / 2 - 32..len / 2 + 32].iter_mut().for_each(|b| *b ^= 0xa5);
        let mut nan = bytes.clone();
        nan[kv + 8..kv + 12].copy_from_slice(&f32::NAN.to_le_bytes());
        let mut inf = bytes.clone();
        inf[len - 4..].copy_from_slice(&f32::NEG_INFINITY.to_le_bytes());
        let mut id = bytes.clone();
        id[HEADER] ^= 1;
        let mut appended = bytes.clone();
        appended.push(0);
        let cases: [(&str, Vec<u8>, &str); 6] = [
            ("flipped", flipped, "digest mismatch"),
            ("NaN", nan.clone(), "digest mismatch"),
            ("an id", id, "digest mismatch"),
            ("truncated", bytes[..len - 1].to_vec(), "truncated or padded"),
            ("appended", appended, "truncated or padded"),
            ("the digest itself", [&bytes[..DIGEST_AT], &[0; 32], &bytes[HEADER..]].concat(), "digest mismatch"),
        ];
        for (kind, data, needle) in cases {
            let (r, i) = refusals(&p, &data, &l);
            assert!(r.contains(needle) && i.contains(needle), "{kind}: {r} / {i}");
        }
        // Resealed, a NaN or an infinity is still refused, naming the layer.
        for (data, layer) in [(nan, 0), (inf, 1)] {
            let mut data = data;
            reseal(&mut data);
            let (r, i) = refusals(&p, &data, &l);
            let needle = format!("non-finite K/V value (NaN or infinity) in layer {layer}");
            assert!(r.contains(&needle) && i.contains(&needle), "{r} / {i}");
        }
        // A resealed file is accepted again: the digest was the only thing wrong.
        let mut fixed = [&bytes[..DIGEST_AT], &[0; 32], &bytes[HEADER..]].concat();
        reseal(&mut fixed);
        assert_eq!(fixed, bytes);
    }

    #[test]
    fn half_precision_infinities_are_refused() {
        for (dtype, inf) in [(DType::F16, 0x7c00u16), (DType::BF16, 0xff80u16)] {
            let dir = tempfile::tempdir().unwrap();
            let l = SessionLayout { kv_dtype: dtype, ..layout() };
            let p = confined_path(dir.path(), "h").unwrap();
            write(&p, &l, &session(&l)).unwrap();
            assert!(read(&p, &l).is_ok(), "{dtype}");
            let mut bytes = std::fs::read(&p).unwrap();
            let at = HEADER + 16 + 2 * KV_WIDTH_BYTES + 2;
            bytes[at..at + 2].copy_from_slice(&inf.to_le_bytes());
            reseal(&mut bytes);
            let (r, i) = refusals(&p, &bytes, &l);
            assert!(r.contains("non-finite") && i.contains("non-finite"), "{dtype}: {r} / {i}");
        }
    }

    #[test]
    fn quantized_sessions_round_trip_and_refuse_bad_scales_and_widths() {
        for q in [tf_core::QuantType::Q8_0, tf_core::QuantType::Q4_0] {
            let dir = tempfile::tempdir().unwrap();
            let l = SessionLayout { kv_dtype: DType::Quant(q), kv_widths: vec![32, 64], ..layout() };
            let p = confined_path(dir.path(), "q").unwrap();
            let mut s = session(&l);
            // Each block's scale finite (the pattern's bytes could spell an infinity).
            for block in s.layers.iter_mut().flat_map(|l| l.chunks_exact_mut(q.block_bytes())) {
                block[..2].copy_from_slice(&0x3800u16.to_le_bytes()); // f16 0.5
            }
            assert_eq!(s.layers[0].len(), 2 * 2 * 2 * q.block_bytes(), "{q:?}: 4 tokens of one block, K and V");
            write(&p, &l, &s).unwrap();
            assert_eq!(read(&p, &l).unwrap(), s, "{q:?}");
            // An infinite scale in the second layer's second block.
            let mut bytes = std::fs::read(&p).unwrap();
            let at = HEADER + 16 + 2 * KV_WIDTH_BYTES + s.layers[0].len() + q.block_bytes();
            bytes[at..at + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
            reseal(&mut bytes);
            let (r, i) = refusals(&p, &bytes, &l);
            let needle = "non-finite K/V value (NaN or infinity) in layer 1";
            assert!(r.contains(needle) && i.contains(needle), "{q:?}: {r} / {i}");
        }
        // Slots of 2 values are no whole number of blocks: an f32 file relabelled is refused.
        let dir = tempfile::tempdir().unwrap();
        let p = confined_path(dir.path(), "w").unwrap();
        write(&p, &layout(), &session(&layout())).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[20] = verify::dtype_code(DType::Quant(tf_core::QuantType::Q8_0));
        reseal(&mut bytes);
        let l = SessionLayout { kv_dtype: DType::Quant(tf_core::QuantType::Q8_0), ..layout() };
        let (r, i) = refusals(&p, &bytes, &l);
        let needle = "KV slot width 2 is not a whole number of q8_0 blocks of 32";
        assert!(r.contains(needle) && i.contains(needle), "{r} / {i}");
    }

    #[test]
    fn an_old_format_version_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout();
        let p = confined_path(dir.path(), "old").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let (r, i) = refusals(&p, &bytes, &l);
        assert!(r.contains("format version 1 has no payload digest") && r == i, "{r} / {i}");
        let (r, _) = refusals(&p, &bytes[..20], &l);
        assert!(r.contains("format version 1"), "{r}");
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        let (r, i) = refusals(&p, &bytes, &l);
        assert!(r.contains("format version 2 has no state layer table") && r == i, "{r} / {i}");
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        let (r, i) = refusals(&p, &bytes, &l);
        assert!(r.contains("format version 3 names its model by a fingerprint over samples") && r == i, "{r} / {i}");
        bytes[8..12].copy_from_slice(&4u32.to_le_bytes());
        let (r, i) = refusals(&p, &bytes, &l);
        assert!(r.contains("format version 4 has no KV width table") && r == i, "{r} / {i}");
    }

    #[test]
    fn a_fifo_is_refused_at_once_and_a_planted_temporary_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout();
        let fifo = confined_path(dir.path(), "fifo").unwrap();
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let (f, lc) = (fifo.clone(), l.clone());
        std::thread::spawn(move || tx.send((read(&f, &lc).map(|_| ()), inspect(&f).map(|_| ()))));
        let (r, i) = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("reading a FIFO blocked");
        for e in [r.unwrap_err().to_string(), i.unwrap_err().to_string()] {
            assert!(e.contains("not a regular file (it is a FIFO)"), "{e}");
        }
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("planted.tfsession.tmp")).unwrap();
        let p = confined_path(dir.path(), "planted").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(read(&p, &l).unwrap(), session(&l));
        // A link at the target itself is refused rather than replaced or followed.
        let link = confined_path(dir.path(), "link").unwrap();
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(write(&link, &l, &session(&l)), Err(SessionError::Symlink(_))));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_symlinked_session_folder_is_refused() {
        let real = tempfile::tempdir().unwrap();
        let l = layout();
        let p = confined_path(real.path(), "s").unwrap();
        write(&p, &l, &session(&l)).unwrap();
        let holder = tempfile::tempdir().unwrap();
        let linked = holder.path().join("sess");
        std::os::unix::fs::symlink(real.path(), &linked).unwrap();
        let via = confined_path(&linked, "s").unwrap();
        assert!(matches!(read(&via, &l), Err(SessionError::Symlink(_))));
        assert!(matches!(inspect(&via), Err(SessionError::Symlink(_))));
        let fresh = confined_path(&linked, "fresh").unwrap();
        assert!(matches!(write(&fresh, &l, &session(&l)), Err(SessionError::Symlink(_))));
        assert!(!real.path().join("fresh.tfsession").exists());
    }
}
