//! A model's MTP head run over a prompt's hidden rows, for comparing heads however loaded.

use tf_backend::{AttnMeta, Backend};
use tf_models::{Batch, Model};

/// The MTP logits of every position but the last of `ids` on `b` (the head `--draft mtp` loads
/// beside `m`), fed to the head in chunks of `chunk` rows: `[len - 1, vocab]` row-major.
pub fn mtp_logits<B: Backend>(b: &B, m: &Model<B>, ids: &[u32], chunk: usize) -> Vec<f32> {
    let head = m.load_mtp(b).unwrap_or_else(|e| panic!("{}: {e}", m.dir.display()));
    let (n, blocks) = (ids.len(), ids.len().div_ceil(16));
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut cache = m.decoder.alloc_cache(b, blocks, 16, 1).expect("a cache");
    let meta = AttnMeta::single(0, n, table.clone(), 16); // (state slot 0 for the hybrids)
    let batch = Batch { ids, meta: &meta, logits_rows: &[n - 1], held: None };
    let (_, hidden) = m.decoder.forward_hidden(b, &batch, &mut cache);
    let hidden = b.download(&hidden);
    let w = m.decoder.spec.hidden_size;
    let mut mtp_cache = head.alloc_cache(b, blocks, 16).expect("a cache");
    let mut out = Vec::new();
    for start in (0..n - 1).step_by(chunk) {
        let len = chunk.min(n - 1 - start);
        let meta = AttnMeta::single(start, len, table.clone(), 16);
        let rows: Vec<usize> = (0..len).collect();
        let batch = Batch { ids: &ids[start + 1..start + 1 + len], meta: &meta, logits_rows: &rows, held: None };
        let h = b.upload(&hidden[start * w..(start + len) * w], len, w);
        let (logits, _) = head.forward(b, &m.decoder, &batch, &h, &mut mtp_cache);
        out.extend(b.download(&logits));
    }
    out
}
