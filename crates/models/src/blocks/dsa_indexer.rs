//! The lightning indexer of DeepSeek sparse attention (DeepSeek V3.2, GLM-5), loaded beside a
//! latent attention layer (`blocks/mla.rs`): its query `wq_b(q_a_layernorm(q_a_proj(x)))` of
//! `index_n_heads` heads, its key `k_norm(wk(x))` (a LayerNorm with bias), both roped over their
//! first `qk_rope_head_dim` dims with the attention's rope, and per-head weights
//! `weights_proj(x)`. The key is cached after the latent row in the same slot; the scores, the
//! top-k and the attention over the kept keys are `Backend::sparse_attention`.

use crate::error::ModelError;
use crate::spec::{IndexerSpec, ModelSpec};
use crate::weights::Loader;
use tf_backend::{Backend, DsaParams};

/// The epsilon of the indexer's `k_norm` (transformers builds it with 1e-6).
const K_NORM_EPS: f32 = 1e-6;

/// One layer's indexer: the weights it applies itself (its input projections of the block's
/// normed input, `wk` and `weights_proj`, are among the attention's inputs).
pub(crate) struct Indexer<B: Backend> {
    /// `wq_b` `[heads * head_dim, q_lora_rank]`, rows in the rotate-half layout.
    pub(crate) wq_b: B::Mat,
    /// `k_norm`'s weight and bias, in the same layout.
    k_norm: (B::Vec, B::Vec),
    /// The scores' shape and the keys kept.
    pub(crate) params: DsaParams,
}

/// The order in which one head's `width` dims are taken: the first `rope` dims de-interleaved
/// (`0, 2, .., 1, 3, ..`) where `interleave` says, then the rest as they are.
fn head_order(width: usize, rope: usize, interleave: bool) -> Vec<usize> {
    let rot: Vec<usize> = match interleave {
        true => (0..rope).step_by(2).chain((1..rope).step_by(2)).collect(),
        false => (0..rope).collect(),
    };
    rot.into_iter().chain(rope..width).collect()
}

impl<B: Backend> Indexer<B> {
    /// Loads `{a}indexer.*` (`a`: the attention's prefix); returns it with its two input
    /// projections of the normed input, `wk` `[head_dim, hidden]` and `weights_proj` `[heads,
    /// hidden]` (read in f32, as transformers keeps it).
    pub(crate) fn load(
        s: &ModelSpec,
        ix: IndexerSpec,
        rope: usize,
        q_lora_rank: usize,
        ld: &Loader<'_, B>,
        a: &str,
    ) -> Result<(Self, [B::Mat; 2]), ModelError> {
        let (heads, d, hidden) = (ix.n_heads, ix.head_dim, s.hidden_size);
        let i = format!("{a}indexer.");
        let order = head_order(d, rope, ix.rope_interleave);
        let q_rows: Vec<usize> = (0..heads).flat_map(|h| order.iter().map(move |&r| h * d + r)).collect();
        let wq_b = ld.mat_rows(&format!("{i}wq_b.weight"), heads * d, q_lora_rank, &q_rows)?;
        let wk = ld.mat_rows(&format!("{i}wk.weight"), d, hidden, &order)?;
        let weights = ld.mat_f32(&format!("{i}weights_proj.weight"), heads, hidden)?;
        let take = |name: &str| -> Result<B::Vec, ModelError> {
            let v = ld.host_values(&format!("{i}k_norm.{name}"), &[d])?;
            Ok(ld.backend_vec(&order.iter().map(|&r| v[r]).collect::<Vec<f32>>()))
        };
        let k_norm = (take("weight")?, take("bias")?);
        let params = DsaParams { heads, head_dim: d, topk: ix.topk };
        Ok((Indexer { wq_b, k_norm, params }, [wk, weights]))
    }

    /// The cached key of each row: `k_norm(wk(x))`, roped at `pos`.
    pub(crate) fn key(&self, b: &B, s: &ModelSpec, wk_out: &B::Act, pos: &[u32]) -> B::Act {
        let mut k = b.layer_norm(wk_out, &self.k_norm.0, &self.k_norm.1, K_NORM_EPS);
        b.rope(&mut k, pos, self.params.head_dim, &s.rope_full);
        k
    }

    /// Ropes the indexer's query heads (`wq_b` of the normed low-rank query) at `pos`.
    pub(crate) fn rope_query(&self, b: &B, s: &ModelSpec, q: &mut B::Act, pos: &[u32]) {
        b.rope(q, pos, self.params.head_dim, &s.rope_full);
    }
}

#[cfg(test)]
mod tests {
    use super::head_order;

    #[test]
    fn only_the_rope_dims_are_deinterleaved() {
        assert_eq!(head_order(6, 4, true), vec![0, 2, 1, 3, 4, 5]);
        assert_eq!(head_order(6, 4, false), vec![0, 1, 2, 3, 4, 5]);
    }
}
