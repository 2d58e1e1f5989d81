//! The one check every session file goes through before any of it is used, by `restore`,
//! `generate --session` and `session inspect` alike: magic and version, a self-consistent header
//! (and, given a model, one that matches it), the exact size the header and the state shape
//! and KV width tables imply, the SHA-256 of every other byte, K/V and state values all finite,
//! and (given a model) the tensor-parallel ranks, KV slot widths and state shapes equal to its
//! own and ids below its embedding rows.

use super::{
    CheckedSession, DIGEST_AT, HEADER, KV_WIDTH_BYTES, MAGIC, MAX_KV_LAYERS, MAX_STATE_LAYERS, STATE_SHAPE_BYTES,
    SessionError, SessionHeader, SessionLayout, VERSION,
};
use sha2::{Digest, Sha256};
use std::io::Read;
use tf_backend::StateShape;
use tf_core::{DType, QuantType};

/// The KV dtype a header byte names.
pub(super) fn dtype_of(code: u8) -> Option<DType> {
    match code {
        1 => Some(DType::F32),
        2 => Some(DType::F16),
        3 => Some(DType::BF16),
        4 => Some(DType::Quant(QuantType::Q8_0)),
        5 => Some(DType::Quant(QuantType::Q4_0)),
        _ => None,
    }
}

/// The header byte naming `dtype` (0: not a KV dtype).
pub(super) fn dtype_code(dtype: DType) -> u8 {
    match dtype {
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        DType::Quant(QuantType::Q8_0) => 4,
        DType::Quant(QuantType::Q4_0) => 5,
        _ => 0,
    }
}

/// The SHA-256 a file of these bytes must carry: every byte but the digest's own.
pub(super) fn digest_of(head: &[u8], payload: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(&head[..DIGEST_AT]);
    for part in payload {
        h.update(part);
    }
    h.finalize().into()
}

/// The byte offset of the first NaN or infinity in `bytes` of `dtype`, if any.
fn first_non_finite(dtype: DType, bytes: &[u8]) -> Option<usize> {
    let size = dtype.size();
    let bad = |c: &[u8]| match dtype {
        DType::F32 => !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite(),
        DType::F16 => u16::from_le_bytes([c[0], c[1]]) & 0x7c00 == 0x7c00,
        DType::BF16 => u16::from_le_bytes([c[0], c[1]]) & 0x7f80 == 0x7f80,
        // A block's f16 scale (its codes are integers).
        DType::Quant(_) => u16::from_le_bytes([c[0], c[1]]) & 0x7c00 == 0x7c00,
        _ => false,
    };
    bytes.chunks_exact(size).position(bad).map(|i| i * size)
}

/// Checks the session read from `src` (`len` bytes in all, shown as `shown` in errors) and, with
/// `against`, that it fits that running model; returns its header and, with `against`, its
/// contents. No byte is returned before the whole file has been read and its digest matched.
pub fn verify<R: Read>(
    mut src: R,
    len: u64,
    shown: &str,
    against: Option<&SessionLayout>,
) -> Result<(SessionHeader, Option<CheckedSession>), SessionError> {
    let bad = |msg: String| SessionError::Invalid { path: shown.to_string(), msg };
    let io = |source| SessionError::Io { path: shown.to_string(), source };
    let mut head = [0u8; HEADER];
    let got = read_up_to(&mut src, &mut head).map_err(io)?;
    let short = || bad(format!("{len} bytes is shorter than the header"));
    let u32_at = |i: usize| u64::from(u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]));
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[i..i + 8]);
        u64::from_le_bytes(b)
    };
    if got >= MAGIC.len() && &head[..MAGIC.len()] != MAGIC {
        return Err(bad("not a TensorFold session file (bad magic)".into()));
    }
    if got < 12 {
        return Err(short());
    }
    match u32_at(8) {
        v if v == u64::from(VERSION) => {}
        1 => {
            return Err(bad(
                "format version 1 has no payload digest and is no longer read: save the session again".into()
            ));
        }
        2 => {
            return Err(bad(
                "format version 2 has no state layer table and is no longer read: save the session again".into()
            ));
        }
        3 => {
            return Err(bad("format version 3 names its model by a fingerprint over samples of the weights, \
                 not every byte, and is no longer read: save the session again"
                .into()));
        }
        4 => {
            return Err(bad(
                "format version 4 has no KV width table and is no longer read: save the session again".into()
            ));
        }
        v => return Err(bad(format!("format version {v} (this build reads {VERSION})"))),
    }
    if got < HEADER {
        return Err(short());
    }
    let code = head[20];
    let kv_dtype = dtype_of(code).ok_or_else(|| bad(format!("unknown KV dtype code {code}")))?;
    let dims = [u32_at(21), u32_at(25), u32_at(29), u32_at(33)];
    // The first KV layer's slot width (the width table after the state table has every
    // layer's) and the tensor-parallel ranks whose pools follow (1 in files of one rank).
    let [num_layers, first_width, ranks, block_size] = dims;
    let (fingerprint, n, num_state) = (u64_at(12), u64_at(37), u32_at(45));
    if dims.contains(&0) {
        return Err(bad(format!("KV layout {dims:?} has a zero dimension")));
    }
    if num_state > MAX_STATE_LAYERS as u64 {
        return Err(bad(format!("{num_state} state layers: at most {MAX_STATE_LAYERS}")));
    }
    if num_layers > MAX_KV_LAYERS as u64 {
        return Err(bad(format!("{num_layers} KV layers: at most {MAX_KV_LAYERS}")));
    }
    if n == 0 || !n.is_multiple_of(block_size) {
        return Err(bad(format!("{n} tokens: must be a positive multiple of the block size {block_size}")));
    }
    if let Some(l) = against {
        if fingerprint != l.fingerprint {
            return Err(bad("saved from another model (fingerprint differs)".into()));
        }
        if ranks != l.ranks as u64 {
            return Err(bad(format!(
                "saved by {ranks} tensor-parallel rank(s), each holding its heads' K/V; the model here runs on {} \
                 (restore it with --tensor-parallel-size {ranks})",
                l.ranks
            )));
        }
        let want = [l.kv_widths.len(), l.block_size].map(|d| d as u64);
        if kv_dtype != l.kv_dtype || [num_layers, block_size] != want {
            return Err(bad(format!(
                "KV layout ({num_layers} layers, blocks of {block_size}, {kv_dtype}) differs from the running \
                 ({} layers, blocks of {}, {}){}",
                want[0],
                want[1],
                l.kv_dtype,
                if kv_dtype != l.kv_dtype {
                    format!(" (restore it with --kv-cache-dtype {kv_dtype})")
                } else {
                    String::new()
                }
            )));
        }
        if num_state != l.state.len() as u64 {
            return Err(bad(format!("{num_state} state layers, the running model has {}", l.state.len())));
        }
        if n > l.max_tokens as u64 {
            return Err(bad(format!(
                "{n} tokens: must be a positive multiple of {block_size} and at most {}",
                l.max_tokens
            )));
        }
    }
    let table_len = num_state * STATE_SHAPE_BYTES as u64;
    let widths_len = num_layers * KV_WIDTH_BYTES as u64;
    let before_table = n.checked_mul(4).and_then(|ids| ids.checked_add(HEADER as u64 + table_len + widths_len));
    let at_least = before_table.ok_or_else(|| bad(format!("{n} tokens overflow any file size")))?;
    if len < at_least {
        return Err(bad(format!("file is {len} bytes, expected at least {at_least} (truncated or padded)")));
    }
    let size = |x: u64| usize::try_from(x).map_err(|_| bad(format!("{x} does not fit this machine")));
    let mut hasher = Sha256::new();
    hasher.update(&head[..DIGEST_AT]);
    let mut raw_ids = vec![0u8; 4 * size(n)?];
    src.read_exact(&mut raw_ids).map_err(io)?;
    hasher.update(&raw_ids);
    let mut table = vec![0u8; size(table_len)?];
    src.read_exact(&mut table).map_err(io)?;
    hasher.update(&table);
    let mut width_table = vec![0u8; size(widths_len)?];
    src.read_exact(&mut width_table).map_err(io)?;
    hasher.update(&width_table);
    let state = state_shapes(&table);
    if let Some(l) = against
        && state != l.state
    {
        return Err(bad(format!("state layer shapes {state:?} differ from the running {:?}", l.state)));
    }
    let widths: Vec<u64> = width_table
        .chunks_exact(KV_WIDTH_BYTES)
        .map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    if let Some(i) = widths.iter().position(|&w| w == 0) {
        return Err(bad(format!("KV layer {i} has a slot width of 0")));
    }
    if widths.first().is_some_and(|&w| w != first_width) {
        return Err(bad(format!(
            "the header's first KV layer width {first_width} disagrees with the width table's {}",
            widths[0]
        )));
    }
    if let Some(l) = against
        && widths.iter().map(|&w| w as usize).ne(l.kv_widths.iter().copied())
    {
        return Err(bad(format!("KV slot widths {widths:?} differ from the running {:?}", l.kv_widths)));
    }
    if let DType::Quant(q) = kv_dtype
        && let Some(w) = widths.iter().find(|&&w| !w.is_multiple_of(q.block_len() as u64))
    {
        return Err(bad(format!(
            "KV slot width {w} is not a whole number of {} blocks of {}",
            q.name(),
            q.block_len()
        )));
    }
    let layer_bytes = |w: u64| {
        let values = usize::try_from(n.checked_mul(w)?).ok()?;
        (kv_dtype.bytes_for(values)? as u64).checked_mul(2)
    };
    let slot_bytes = |s: &StateShape| {
        let conv = (s.conv_channels as u64).checked_mul(s.conv_width as u64)?;
        conv.checked_add(s.rec_len as u64)?.checked_mul(4)
    };
    let state_bytes = state.iter().try_fold(0u64, |a, s| a.checked_add(slot_bytes(s)?));
    let kv_bytes = widths.iter().try_fold(0u64, |a, &w| a.checked_add(layer_bytes(w)?));
    let expected = kv_bytes
        .and_then(|kv| kv.checked_add(at_least)?.checked_add(state_bytes?))
        .ok_or_else(|| bad(format!("{n} tokens of this layout overflow any file size")))?;
    if len != expected {
        return Err(bad(format!("file is {len} bytes, expected {expected} (truncated or padded)")));
    }
    if !num_layers.is_multiple_of(ranks) || !num_state.is_multiple_of(ranks) {
        return Err(bad(format!("{num_layers} KV and {num_state} state layers do not split over {ranks} ranks")));
    }
    let header = SessionHeader {
        fingerprint,
        kv_dtype,
        ranks: size(ranks)?,
        kv_widths: widths.iter().map(|&w| size(w)).collect::<Result<_, _>>()?,
        block_size: size(block_size)?,
        num_tokens: size(n)?,
        digest: head[DIGEST_AT..HEADER].try_into().unwrap_or([0; 32]),
        state,
    };
    // With a model the layers are kept; without, one buffer is reused.
    let mut layers = Vec::new();
    let mut scratch = Vec::new();
    let mut non_finite = None;
    for (layer, &w) in widths.iter().enumerate() {
        let per_layer = size(layer_bytes(w).unwrap_or(0))?;
        let buf = if against.is_some() {
            layers.push(vec![0u8; per_layer]);
            layers.last_mut().map_or(&mut scratch, |b| b)
        } else {
            scratch.resize(per_layer, 0);
            &mut scratch
        };
        src.read_exact(buf).map_err(io)?;
        hasher.update(&*buf);
        if non_finite.is_none() {
            non_finite = first_non_finite(kv_dtype, buf).map(|at| (layer, at));
        }
    }
    let mut state = Vec::new();
    let mut state_non_finite = None;
    for (layer, shape) in header.state.iter().enumerate() {
        let mut buf = vec![0u8; shape.slot_bytes()];
        src.read_exact(&mut buf).map_err(io)?;
        hasher.update(&buf);
        if state_non_finite.is_none() {
            state_non_finite = first_non_finite(DType::F32, &buf).map(|at| (layer, at));
        }
        if against.is_some() {
            state.push(buf);
        }
    }
    if <[u8; 32]>::from(hasher.finalize()) != header.digest {
        return Err(bad("payload digest mismatch: the file was altered or damaged after it was saved".into()));
    }
    if let Some((layer, at)) = non_finite {
        return Err(bad(format!("non-finite K/V value (NaN or infinity) in layer {layer} at byte {at} of its K/V")));
    }
    if let Some((layer, at)) = state_non_finite {
        return Err(bad(format!("non-finite state value (NaN or infinity) in state layer {layer} at byte {at}")));
    }
    let Some(l) = against else { return Ok((header, None)) };
    let ids: Vec<u32> = raw_ids.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let ids = l.vocab.check_u32(&ids).map_err(|e| bad(e.to_string()))?;
    Ok((header, Some(CheckedSession { ids, layers, state })))
}

/// The state shapes a table of [`STATE_SHAPE_BYTES`]-byte rows names (one slot each).
fn state_shapes(table: &[u8]) -> Vec<StateShape> {
    let u = |c: &[u8]| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize;
    table
        .chunks_exact(STATE_SHAPE_BYTES)
        .map(|r| StateShape {
            num_slots: 1,
            conv_channels: u(&r[0..4]),
            conv_width: u(&r[4..8]),
            rec_len: u(&r[8..12]),
        })
        .collect()
}

/// Reads into `buf` until it is full or the source ends; returns the bytes read.
fn read_up_to<R: Read>(src: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
