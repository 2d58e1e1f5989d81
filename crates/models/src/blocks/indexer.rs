//! MiniMax M3's lightning indexer, the selection branch of a block-sparse attention layer: from
//! the layer's normed input, `index_q_proj` gives `index_n_heads` query heads and
//! `index_k_proj` one key head of `index_head_dim`, each `(1 + w)` RMS-normed per head
//! (`index_q_norm`, `index_k_norm`) and rotated by the layer's rope; the keys are written per
//! token into the layer's columns of an indexer-key pool (a KV pool after the attention pools,
//! `ModelSpec::index_slot`), and each row's key blocks are chosen from them
//! (`Backend::index_blocks`, tf_backend `sparse.rs`). It has no output of its own.

use crate::error::ModelError;
use crate::spec::{IndexSpec, ModelSpec};
use crate::weights::Loader;
use tf_backend::{AttnMeta, Backend, BlockPicks, IndexParams, QkNorm};

/// One layer's indexer: its projections and norms, and where its keys live.
pub(crate) struct Indexer<B: Backend> {
    /// `index_q_proj` `[heads * head_dim, hidden]`.
    pub(crate) q: B::Mat,
    /// `index_k_proj` `[head_dim, hidden]`.
    pub(crate) k: B::Mat,
    q_norm: B::Vec,
    k_norm: B::Vec,
    params: IndexParams,
    /// Index of its indexer-key pool in `Cache::kv`.
    pub(crate) pool: usize,
}

impl<B: Backend> Indexer<B> {
    /// Loads layer prefix `p`'s indexer (`{p}self_attn.index_*`), its keys in pool `pool` at
    /// `(in_v, col)` of each slot.
    pub(crate) fn load(
        s: &ModelSpec,
        x: &IndexSpec,
        ld: &Loader<'_, B>,
        p: &str,
        (pool, in_v, col): (usize, bool, usize),
    ) -> Result<Self, ModelError> {
        let a = format!("{p}{}.", s.names.attn);
        let d = x.head_dim;
        // Several layers' keys share a slot: in a quantized pool each layer's must be whole
        // blocks, or writing one layer's keys would move another's.
        if let tf_core::DType::Quant(q) = ld.backend_ref().kv_dtype()
            && !d.is_multiple_of(q.block_len())
        {
            return Err(ModelError::Backend(tf_backend::BackendError::Unsupported(format!(
                "a {} KV cache needs heads of a multiple of {} values; this model's indexer keys have \
                 heads of {d} (use --kv-cache-dtype f16 or bf16)",
                q.name(),
                q.block_len()
            ))));
        }
        Ok(Indexer {
            q: ld.mat(&format!("{a}index_q_proj.weight"), x.num_heads * d, s.hidden_size)?,
            k: ld.mat(&format!("{a}index_k_proj.weight"), d, s.hidden_size)?,
            q_norm: ld.vec(&format!("{a}index_q_norm.weight"), d)?,
            k_norm: ld.vec(&format!("{a}index_k_norm.weight"), d)?,
            params: IndexParams {
                num_heads: x.num_heads,
                head_dim: d,
                block_size: x.block_size,
                topk: x.topk,
                local: x.local,
                in_v,
                col,
            },
            pool,
        })
    }

    /// Norms and rope of the projected queries `q` and keys `k`, the keys into the pool, and
    /// each row's chosen blocks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        b: &B,
        s: &ModelSpec,
        mut q: B::Act,
        mut k: B::Act,
        pos: &[u32],
        meta: &AttnMeta,
        kv: &mut B::Kv,
    ) -> BlockPicks {
        let norms = QkNorm { q: &self.q_norm, k: &self.k_norm, eps: s.rms_norm_eps, one_plus: s.norm_one_plus };
        b.qk_norm_rope(&mut q, &mut k, Some(norms), pos, self.params.head_dim, &s.rope_full);
        b.index_blocks(&q, &k, kv, meta, &self.params)
    }
}
