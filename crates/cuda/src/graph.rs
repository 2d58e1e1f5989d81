//! Decode rounds replayed from CUDA graphs. The second round of a shape (model, rows, KV
//! pools, metadata size and furthest 256-key chunk; the first runs op by op, filling what ops
//! cache on first use) is captured into a graph while it runs its ops; later rounds of that
//! shape upload only their inputs (token ids, positions, the attention metadata) into the
//! recording's input buffer and launch the graph, and the recorded ops do not run on the host at all. The kernels and
//! their arguments are those of the captured round, so the values are the same bits. What is
//! recorded is what the model hands `forward_round`: for the decoder, the embedding and the
//! layers (its final norm and head run after, op by op: they read only the residual stream).
//!
//! What makes a replay valid: every per-round host value an op reads comes from the inputs
//! buffer (ops ask `Graphs::input` / `Graphs::meta` while a capture is open; anything else they
//! would upload fails the capture, and the round runs without a graph), and every launch
//! parameter is a function of the key (attention.rs lays its metadata out so offsets depend on
//! rows only, and the split grid on the furthest chunk). Intermediate buffers come from a pool
//! of their own on a side stream (device.rs `Capture`), so the graph holds no memory nodes (they
//! would end its programmatic dependencies: a first try ran 10% slower than launches) and no
//! buffer outside the pool is ever one of them. All work runs on the one compute stream, so two
//! recordings sharing pool memory never overlap; only a replay's inputs go up on a copy stream,
//! after the recording's last launch and before its next (events). Each replay's output is
//! copied out of the pool before anything else runs. A round fed ids an earlier round picked on
//! the device (held.rs) uploads their row indices as its ids and gathers the ids over them before
//! the launch.

use crate::attn_meta::{Packed, last_chunk, pack};
use crate::capture::{Inputs, row_table, state_table};
use crate::ctx::Ctx;
use crate::device::ptr;
use crate::error::must;
use crate::graph_pad::{Padded, bucket};
use crate::held::CudaHeld;
use crate::ops;
use crate::tensor::{CudaAct, CudaKv};
use cudarc::driver::{CudaEvent, CudaGraph, CudaSlice, result, sys};
use std::sync::{Arc, Mutex};
use tf_backend::{KvShape, Round};

/// Recordings kept at most (the least recently used goes first): a serving batch takes many
/// sizes, and a capture (plus instantiating the graph) costs more than a round run op by op.
const KEEP: usize = 64;
/// Rows a recorded round may have at most, unless the options say otherwise
/// (`CudaOptions::graph_rows`).
/// H100, qwen3-8b batch 256: recorded 12.66 against 12.86 ms a round op by op, the host's
/// queueing 0.17 against 2.5 ms (docs/perf.md).
pub(crate) const DEFAULT_MAX_ROWS: usize = 256;
/// Metadata capacity step (u32 values): block tables grow into it without changing the key.
const META_STEP: usize = 1024;

/// What a recording stands for.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Key {
    model: [u64; 2],
    rows: usize,
    meta_cap: usize,
    chunk: usize,
    kv: Vec<u64>,
}

/// With `held`, turns the first `rows` ids of the inputs' device copy (row indices into `held`)
/// into the ids held there.
fn gather_held(b: &Ctx, inputs: &Inputs, held: Option<&CudaHeld>, rows: usize) {
    if let Some(h) = held {
        ops::gather_ids(b, ptr(&inputs.buf, &b.dev.stream), &h.ids, rows);
    }
}

struct Entry {
    key: Key,
    graph: CudaGraph,
    inputs: Arc<Inputs>,
    out: CudaAct,
    /// Row indices `0..rows`: the copy out of the pool is a row gather of the round's own rows
    /// (a kernel, so the norm after it still launches early, which a device-to-device copy would
    /// stop; pad rows are left behind).
    rows: CudaSlice<u32>,
    /// Recorded on the compute stream after each launch: the next inputs' copy waits for it.
    launched: CudaEvent,
    /// Recorded on the copy stream after the inputs' copy: the launch waits for it.
    uploaded: CudaEvent,
}

// SAFETY: the graph handles are used only under the `entries` lock (one thread at a time, as
// the driver requires of a graph).
unsafe impl Send for Entry {}

/// The recordings of one backend, and the round being captured.
pub(crate) struct Graphs {
    on: bool,
    entries: Mutex<Vec<Entry>>,
    /// Keys whose captures failed, with how often (refused for good after `TRIES`).
    refused: Mutex<Vec<(Key, usize)>>,
    /// Keys seen once and run op by op: a key is captured the second time it comes, so what
    /// its ops cache on first use (rope tables) is uploaded outside any capture.
    seen: Mutex<Vec<Key>>,
    /// Rounds captured and rounds replayed so far.
    pub(crate) counts: Mutex<(usize, usize)>,
    /// Rows a recorded round may have at most.
    max_rows: usize,
    /// Each capture's outcome on stderr (`CudaOptions::graph_log`).
    log: bool,
    /// Rounds padded to their bucket's rows before they are recorded (graph_pad.rs).
    pad: bool,
}

/// Captures of one key tried before it is refused (a failure may be a cache filled once).
const TRIES: usize = 2;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Graphs {
    /// Recording on or off for rounds of at most `max_rows` rows; `log`: each capture's outcome
    /// on stderr; `pad`: rounds padded to their bucket's rows.
    pub(crate) fn new(on: bool, log: bool, max_rows: usize, pad: bool) -> Graphs {
        Graphs {
            on,
            entries: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            counts: Mutex::new((0, 0)),
            log,
            max_rows,
            pad,
        }
    }

    /// Whether a recording may stand for round `r`: one new token a sequence, at most
    /// `max_rows` of them, a replayable forward.
    fn eligible<H>(&self, r: &Round<'_, H>) -> bool {
        let rows = r.ids.len();
        let decode = r.meta.seqs.len() == rows && r.meta.seqs.iter().all(|s| s.q_len == 1);
        self.on && r.replayable && decode && rows > 0 && rows <= self.max_rows
    }

    /// The key of an eligible round `r` with packed metadata `meta`.
    fn key<H>(b: &Ctx, r: &Round<'_, H>, kv: &[CudaKv], meta: &Packed) -> Key {
        Key {
            model: r.model,
            rows: r.ids.len(),
            meta_cap: meta.host.len().div_ceil(META_STEP) * META_STEP,
            chunk: last_chunk(r.meta),
            kv: kv.iter().flat_map(|p| [ptr(&p.k, &b.dev.stream), ptr(&p.v, &b.dev.stream)]).collect(),
        }
    }
}

/// `forward_round` of the CUDA backend: a replay, a capture, or the ops as usual. A round is
/// recorded and replayed padded to its bucket's rows (graph_pad.rs); run op by op, it is not.
pub(crate) fn forward_round(
    b: &Ctx,
    g: &Graphs,
    r: &Round<'_, CudaHeld>,
    kv: &mut [CudaKv],
    f: &mut tf_backend::RoundFn<'_, CudaKv, CudaAct, CudaHeld>,
) -> CudaAct {
    if !g.eligible(r) {
        return f(r, kv);
    }
    let rows = r.ids.len();
    // Every pool has the scratch block past its blocks (ops.rs `kv`): one block index for all of
    // them where they agree on blocks and block size, whatever their heads and widths.
    let padded = match scratch_block(kv.iter().map(|p| p.shape)) {
        Some((scratch, block_size)) if g.pad && bucket(rows) > rows && block_size == r.meta.block_size => {
            u32::try_from(scratch).ok().map(|scratch| Padded::new(r, bucket(rows), scratch))
        }
        _ => None,
    };
    let pr = padded.as_ref().map(|p| p.round(r));
    let rec = pr.as_ref().unwrap_or(r);
    let meta = pack(rec.meta, rec.group.max(1));
    let key = Graphs::key(b, rec, kv, &meta);
    let host = Inputs::host(rec, &meta, key.meta_cap);
    if let Some(out) = replay(b, g, &key, &host, rows, r.held) {
        return out;
    }
    if lock(&g.refused).iter().any(|(k, n)| *k == key && *n >= TRIES) {
        return f(r, kv);
    }
    {
        let mut seen = lock(&g.seen);
        if !seen.contains(&key) {
            if seen.len() >= 4 * KEEP {
                seen.remove(0);
            }
            seen.push(key);
            drop(seen);
            return f(r, kv);
        }
    }
    let inputs = Arc::new(Inputs {
        buf: b.dev.upload(&host),
        ids: rec.ids.to_vec(),
        positions: rec.positions.to_vec(),
        states: state_table(rec.meta),
        row_seq: row_table(rec.meta, rec.ids.len()),
        meta,
    });
    gather_held(b, &inputs, r.held, rows);
    match capture(b, g, key.clone(), inputs, kv, f, rec, rows) {
        Some(out) => out,
        None => {
            let mut refused = lock(&g.refused);
            match refused.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => refused.push((key, 1)),
            }
            drop(refused);
            b.forget_captured();
            f(r, kv)
        }
    }
}

/// The scratch block (the index past the pools' blocks) and the block size, where every pool of
/// shape `pools` has the same blocks of the same size (KV pools of other heads or widths in one
/// model, Gemma 4's, still do); `None` without pools or where they differ.
fn scratch_block(mut pools: impl Iterator<Item = KvShape>) -> Option<(usize, usize)> {
    let blocks = |p: KvShape| (p.num_blocks, p.block_size);
    let first = blocks(pools.next()?);
    pools.all(|p| blocks(p) == first).then_some(first)
}

/// Replays the recording of `key` with inputs `host` (whose first `rows` ids index `held` when
/// given); its first `rows` output rows, copied out of the pool.
fn replay(b: &Ctx, g: &Graphs, key: &Key, host: &[u32], rows: usize, held: Option<&CudaHeld>) -> Option<CudaAct> {
    let mut entries = lock(&g.entries);
    let i = entries.iter().position(|e| e.key == *key)?;
    let e = entries.remove(i);
    let d = &b.dev;
    // The inputs go up on the copy stream once the recording's last launch (which reads them)
    // is done, so the copy runs while the compute stream finishes the round before (its head
    // and argmax) instead of between that round's argmax and this launch.
    must(d.to_device.wait(&e.launched), "ordering a round's inputs after the last launch");
    // SAFETY: the buffer holds `host.len()` values (the key fixes the length); the copy is
    // staged before it returns, and ordered before the launch by `uploaded`.
    let r = unsafe { result::memcpy_htod_async(ptr(&e.inputs.buf, &d.stream), host, d.to_device.cu_stream()) };
    must(r, "copying a round's inputs");
    must(e.uploaded.record(&d.to_device), "recording an event");
    must(d.stream.wait(&e.uploaded), "ordering a launch after its inputs");
    gather_held(b, &e.inputs, held, rows);
    must(e.graph.launch(), "launching a recorded round");
    must(e.launched.record(&d.stream), "recording an event");
    let out = copy_out(b, &e.out, &e.rows, rows);
    entries.push(e);
    lock(&g.counts).1 += 1;
    Some(out)
}

/// Captures `f` over round `r` as the recording of `key`, launches it, and returns its first
/// `rows` output rows; `None` when the round did something a recording cannot stand for
/// (nothing of it ran then).
#[allow(clippy::too_many_arguments)]
fn capture(
    b: &Ctx,
    g: &Graphs,
    key: Key,
    inputs: Arc<Inputs>,
    kv: &mut [CudaKv],
    f: &mut tf_backend::RoundFn<'_, CudaKv, CudaAct, CudaHeld>,
    r: &Round<'_, CudaHeld>,
    rows: usize,
) -> Option<CudaAct> {
    let d = &b.dev;
    b.capture.set(Some(inputs.clone()));
    let begun = d.begin_capture();
    let out = begun.then(|| f(r, kv));
    b.capture.set(None);
    let (clean, pinned) = d.end_capture_mode();
    let graph = if begun { d.stream.end_capture(sys::CUgraphInstantiate_flags(0)) } else { Ok(None) };
    drop(pinned);
    if g.log {
        let got = match (&out, clean, &graph) {
            (Some(_), true, Ok(Some(_))) => "recorded".to_string(),
            (None, ..) => "not begun".to_string(),
            (_, false, _) => "spoiled (an op uploaded or downloaded)".to_string(),
            (_, _, g) => format!("not instantiated ({:?})", g.as_ref().err()),
        };
        eprintln!("graph: capture of {} rows ({rows} real), meta {}: {got}", key.rows, key.meta_cap);
    }
    let (Some(out), true, Ok(Some(graph))) = (out, clean, graph) else {
        return None;
    };
    out.f32_ready()?;
    let all = d.upload(&(0..out.rows as u32).collect::<Vec<u32>>());
    must(graph.launch(), "launching a recorded round");
    let event = || must(d.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)), "creating an event");
    let (launched, uploaded) = (event(), event());
    must(launched.record(&d.stream), "recording an event");
    let copy = copy_out(b, &out, &all, rows);
    let mut entries = lock(&g.entries);
    if entries.len() >= KEEP {
        entries.remove(0);
    }
    entries.push(Entry { key, graph, inputs, out, rows: all, launched, uploaded });
    lock(&g.counts).0 += 1;
    Some(copy)
}

/// A copy of `x`'s first `n` rows in memory of the ordinary pool (`rows`: the indices `0..x.rows`).
fn copy_out(b: &Ctx, x: &CudaAct, rows: &CudaSlice<u32>, n: usize) -> CudaAct {
    crate::ops::gather(b, x, ptr(rows, &b.dev.stream), n.min(x.rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::{AttnMeta, SeqAttn};

    fn meta(seqs: &[(usize, usize)]) -> AttnMeta {
        let mut m = AttnMeta { state_slots: Vec::new(), seqs: Vec::new(), slot_mapping: Vec::new(), block_size: 16 };
        let mut q_start = 0;
        for &(start_pos, q_len) in seqs {
            m.seqs.push(SeqAttn { q_start, q_len, start_pos, block_table: (0..40).collect() });
            m.slot_mapping.extend(start_pos..start_pos + q_len);
            q_start += q_len;
        }
        m
    }

    fn round<'a>(m: &'a AttnMeta, ids: &'a [u32], pos: &'a [u32]) -> Round<'a> {
        Round { replayable: true, model: [1, 2], ids, held: None, positions: pos, meta: m, group: 4 }
    }

    #[test]
    fn only_decode_rounds_of_replayable_forwards_are_recorded() {
        let g = Graphs::new(true, false, DEFAULT_MAX_ROWS, true);
        let one = meta(&[(300, 1), (7, 1)]);
        assert!(g.eligible(&round(&one, &[3, 4], &[300, 7])));
        // A prefill run, a forward that reads the host elsewhere.
        let pre = meta(&[(0, 2)]);
        assert!(!g.eligible(&round(&pre, &[3, 4], &[0, 1])));
        assert!(!g.eligible(&Round { replayable: false, ..round(&one, &[3, 4], &[300, 7]) }));
        // More rows than a recording takes; and recording off.
        let many = meta(&vec![(5, 1); DEFAULT_MAX_ROWS + 1]);
        let ids = vec![1; DEFAULT_MAX_ROWS + 1];
        assert!(!g.eligible(&round(&many, &ids, &ids)));
        assert!(Graphs::new(true, false, DEFAULT_MAX_ROWS + 8, true).eligible(&round(&many, &ids, &ids)));
        assert!(!Graphs::new(false, false, DEFAULT_MAX_ROWS, true).eligible(&round(&one, &[3, 4], &[300, 7])));
    }

    #[test]
    fn pools_of_other_heads_and_widths_share_the_scratch_block_of_equal_block_counts() {
        let pool = |num_kv_heads, head_dim, num_blocks, block_size| KvShape {
            num_blocks,
            block_size,
            num_kv_heads,
            head_dim,
            latent: false,
        };
        // Gemma 4: sliding pools (2 heads of 16) and full pools (1 head of 32), as alloc_cache makes them.
        let mixed = [pool(2, 16, 40, 16), pool(1, 32, 40, 16), pool(2, 16, 40, 16)];
        assert_eq!(scratch_block(mixed.into_iter()), Some((40, 16)));
        assert_eq!(scratch_block([pool(2, 16, 40, 16), pool(1, 32, 41, 16)].into_iter()), None);
        assert_eq!(scratch_block([pool(2, 16, 40, 16), pool(2, 16, 40, 32)].into_iter()), None);
        assert_eq!(scratch_block(std::iter::empty()), None);
    }

    #[test]
    fn decode_metadata_packs_alike_for_every_query_head_group() {
        // A recording's inputs hold the metadata packed for the round's group (`Round::group`);
        // layers of other groups (Step's sliding layers, Gemma 4's full layers) find it there only
        // if a decode round packs the same for each group the attention takes (at most 64).
        let m = meta(&[(300, 1), (7, 1), (0, 1), (600, 1)]);
        let one = pack(&m, 1);
        assert!((2..=64).all(|g| pack(&m, g) == one));
        // Prefill rows pack by group (work items of whole query tokens): other uploads.
        let pre = meta(&[(0, 40)]);
        assert_ne!(pack(&pre, 1), pack(&pre, 8));
    }

    #[test]
    fn the_furthest_chunk_moves_every_256_keys() {
        assert_eq!(last_chunk(&meta(&[(255, 1)])), 0);
        assert_eq!(last_chunk(&meta(&[(256, 1), (3, 1)])), 1);
        assert_eq!(last_chunk(&meta(&[(0, 600)])), 2);
    }
}
