//! Multi-head latent attention (DeepSeek V3), in the absorbed form every round alike: the cache
//! keeps one latent row per token, `[c_kv normed (kv_lora_rank) | k_pe roped (qk_rope_head_dim)]`,
//! as the one KV head of a latent pool (its values are its keys). Each query head becomes
//! `[q_nope_h · W_UK_h | q_pe_h]` (`W_UK_h`: `kv_b_proj`'s key rows of head h, transposed), so
//! its scores against the latent rows are transformers' scores against the expanded keys; the
//! attention's output per head is the softmax-weighted latent row, full width, and `W_UV_h`
//! (`kv_b_proj`'s value rows of head h) padded with zero columns over the rope dims takes its
//! first `kv_lora_rank` values to `v_head_dim`, before `o_proj`. Prefill and decode run the
//! same ops, so chunked == whole and concurrent == solo hold by construction. With a lightning
//! indexer (DeepSeek sparse attention, `blocks/dsa_indexer.rs`) the pool's slot is the latent row
//! then the indexer's key, and each query attends over the keys the indexer keeps
//! (`Backend::sparse_attention`) instead of every causal key.

use super::dsa_indexer::Indexer;
use crate::error::ModelError;
use crate::spec::{MlaSpec, ModelSpec};
use crate::weights::Loader;
use tf_backend::{AttnMeta, AttnParams, Backend, HeadWeights};

/// The epsilon of `q_a_layernorm` and `kv_a_layernorm`: transformers builds them with the
/// norm's default, not `rms_norm_eps`.
const LATENT_NORM_EPS: f32 = 1e-6;

/// One layer's latent attention: its projections, norms, absorbed weights; its pool is `kv`.
pub(crate) struct Mla<B: Backend> {
    /// The projections of the normed input: `q_a_proj` (or `q_proj`'s nope and rope rows),
    /// then `kv_a_proj_with_mqa`'s latent and rope rows, then the indexer's `wk` and
    /// `weights_proj` where there is one.
    pub(crate) inputs: Vec<B::Mat>,
    /// `q_a_layernorm` and `q_b_proj`'s nope and rope rows, where the query is low-rank.
    q_b: Option<(B::Vec, B::Mat, B::Mat)>,
    kv_norm: B::Vec,
    /// `W_UK` per head, `[heads * kv_lora_rank, qk_nope_head_dim]`.
    uk: Vec<f32>,
    /// `W_UV` per head with zero rope columns, `[heads * v_head_dim, kv_lora_rank + qk_rope_head_dim]`.
    uv: Vec<f32>,
    /// `uk` and `uv` as the backend's `head_matmul` reads them, where it keeps its own copy
    /// (`Backend::head_copy`: on the device, or transposed per head on the CPU).
    copies: Option<(B::Vec, B::Vec)>,
    m: MlaSpec,
    attn: AttnParams,
    /// The lightning indexer choosing each query's keys (DeepSeek sparse attention).
    indexer: Option<Indexer<B>>,
    /// Index of this layer's pool in `Cache::kv`.
    pub(crate) kv: usize,
}

/// Rows of heads `heads` of a per-head projection `[heads * width, ..]` taking each head's
/// `part` (offsets into the head), the rope dims de-interleaved (`0, 2, .., 1, 3, ..`) where
/// `interleave` says.
fn head_rows(
    heads: std::ops::Range<usize>,
    width: usize,
    part: std::ops::Range<usize>,
    interleave: bool,
) -> Vec<usize> {
    let local: Vec<usize> = match interleave {
        true => part.clone().step_by(2).chain(part.clone().skip(1).step_by(2)).collect(),
        false => part.collect(),
    };
    heads.flat_map(|h| local.iter().map(move |&r| h * width + r)).collect()
}

impl<B: Backend> Mla<B> {
    /// Whether a lightning indexer picks the keys (its scores are read on the host by the
    /// backends' default, so a round with it is not replayed from a recording).
    pub(crate) fn sparse(&self) -> bool {
        self.indexer.is_some()
    }

    /// Loads layer prefix `p`'s latent attention (`{p}self_attn.*`) and its output projection
    /// (sharded: this rank's query heads, their `W_UK` and `W_UV`, and `o_proj`'s columns; the
    /// latent projection and its cache whole on every rank).
    pub(crate) fn load(
        s: &ModelSpec,
        m: MlaSpec,
        ld: &Loader<'_, B>,
        p: &str,
        kv: usize,
    ) -> Result<(Self, B::Mat), ModelError> {
        let (hidden, heads) = (s.hidden_size, s.num_heads);
        let hp = ld.part(heads);
        let (nope, rope, lora) = (m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank);
        let a = format!("{p}{}.", s.names.attn);
        let qk = m.qk_head_dim();
        let q_rows = |part, il| head_rows(hp.clone(), qk, part, il);
        let (mut inputs, q_b) = match m.q_lora_rank {
            Some(r) => {
                let name = format!("{a}q_b_proj.weight");
                let q_a = ld.mat(&format!("{a}q_a_proj.weight"), r, hidden)?;
                let norm = ld.vec(&format!("{a}q_a_layernorm.weight"), r)?;
                let q_nope = ld.mat_rows(&name, heads * qk, r, &q_rows(0..nope, false))?;
                let q_pe = ld.mat_rows(&name, heads * qk, r, &q_rows(nope..qk, m.rope_interleave))?;
                (vec![q_a], Some((norm, q_nope, q_pe)))
            }
            None => {
                let name = format!("{a}q_proj.weight");
                let q_nope = ld.mat_rows(&name, heads * qk, hidden, &q_rows(0..nope, false))?;
                let q_pe = ld.mat_rows(&name, heads * qk, hidden, &q_rows(nope..qk, m.rope_interleave))?;
                (vec![q_nope, q_pe], None)
            }
        };
        let name = format!("{a}kv_a_proj_with_mqa.weight");
        inputs.push(ld.mat_rows(&name, lora + rope, hidden, &head_rows(0..1, 0, 0..lora, false))?);
        inputs.push(ld.mat_rows(
            &name,
            lora + rope,
            hidden,
            &head_rows(0..1, 0, lora..lora + rope, m.rope_interleave),
        )?);
        let kv_norm = ld.vec(&format!("{a}kv_a_layernorm.weight"), lora)?;
        let indexer = match (m.indexer, m.q_lora_rank) {
            (Some(ix), Some(r)) => {
                let (ix, proj) = Indexer::load(s, ix, rope, r, ld, &a)?;
                inputs.extend(proj);
                Some(ix)
            }
            (Some(_), None) => {
                let msg = "the sparse attention's indexer reads the low-rank query: q_lora_rank is needed".to_string();
                return Err(ModelError::Config { file: Default::default(), msg });
            }
            (None, _) => None,
        };
        // kv_b_proj `[heads * (nope + v), lora]`: per head its key rows, then its value rows.
        let per = nope + m.v_head_dim;
        let kv_b = ld.host_values(&format!("{a}kv_b_proj.weight"), &[heads * per, lora])?;
        let mut uk = Vec::with_capacity(heads * lora * nope);
        let mut uv = Vec::with_capacity(heads * m.v_head_dim * (lora + rope));
        for h in hp.clone() {
            let row = |i: usize| &kv_b[(h * per + i) * lora..][..lora];
            uk.extend((0..lora).flat_map(|o| (0..nope).map(move |i| row(i)[o])));
            for o in 0..m.v_head_dim {
                uv.extend_from_slice(row(nope + o));
                uv.extend(std::iter::repeat_n(0.0, rope));
            }
        }
        let attn = AttnParams {
            num_heads: hp.len(),
            num_kv_heads: 1,
            head_dim: m.latent_dim(),
            scale: s.attn_scale,
            window: None,
            softcap: None,
        };
        let out_name = format!("{a}{}.weight", s.names.attn_out);
        let out = ld.mat_split_cols(&out_name, hidden, heads * m.v_head_dim, m.v_head_dim)?;
        let (n, v) = (hp.len(), m.v_head_dim);
        let copies = (ld.head_copy(&HeadWeights { host: &uk, heads: n, out: lora })).zip(ld.head_copy(&HeadWeights {
            host: &uv,
            heads: n,
            out: v,
        }));
        Ok((Mla { inputs, q_b, kv_norm, uk, uv, copies, m, attn, indexer, kv }, out))
    }

    /// The latent attention over its projected inputs (`inputs`' order): `[rows, heads * v_head_dim]`.
    pub(crate) fn run(
        &self,
        b: &B,
        s: &ModelSpec,
        x: Vec<B::Act>,
        pos: &[u32],
        meta: &AttnMeta,
        kv: &mut B::Kv,
    ) -> B::Act {
        let (heads, m, eps) = (self.attn.num_heads, &self.m, LATENT_NORM_EPS);
        let mut x = x.into_iter();
        let mut next = || x.next().unwrap_or_else(|| unreachable!("one output per input projection"));
        let (q_nope, mut q_pe, index_q) = match &self.q_b {
            Some((norm, q_nope, q_pe)) => {
                let q_lat = b.rms_norm(&next(), norm, eps, false);
                let ws: Vec<&B::Mat> =
                    [q_nope, q_pe].into_iter().chain(self.indexer.as_ref().map(|i| &i.wq_b)).collect();
                let mut q = b.matmul_many(&q_lat, &ws).into_iter();
                let mut take = || q.next().unwrap_or_else(|| unreachable!("one output per weight"));
                let (nope, pe) = (take(), take());
                (nope, pe, self.indexer.as_ref().map(|_| take()))
            }
            None => (next(), next(), None),
        };
        let (c_kv, mut k_pe) = (next(), next());
        let c_kv = b.rms_norm(&c_kv, &self.kv_norm, eps, false);
        b.rope(&mut q_pe, pos, m.qk_rope_head_dim, &s.rope_full);
        b.rope(&mut k_pe, pos, m.qk_rope_head_dim, &s.rope_full);
        let latent = b.concat_heads(&c_kv, &k_pe, 1); // (tokens, kv_lora_rank + rope)
        let uk = HeadWeights { host: &self.uk, heads, out: m.kv_lora_rank };
        let (uk_copy, uv_copy) = (self.copies.as_ref().map(|d| &d.0), self.copies.as_ref().map(|d| &d.1));
        let q = b.concat_heads(&b.head_matmul(&q_nope, &uk, uk_copy), &q_pe, heads); // (tokens, heads * latent)
        let o = match (&self.indexer, index_q) {
            (Some(ix), Some(mut index_q)) => {
                let (wk_out, index_w) = (next(), next());
                ix.rope_query(b, s, &mut index_q, pos);
                // The slot is the latent row, then the indexer's key.
                let slot = b.concat_heads(&latent, &ix.key(b, s, &wk_out, pos), 1);
                b.sparse_attention(&q, &index_q, &index_w, &slot, kv, meta, &self.attn, &ix.params)
            }
            // The pool keeps the latent row alone; its values are its keys.
            _ => b.attention(&q, &latent, &latent, kv, meta, &self.attn),
        };
        b.head_matmul(&o, &HeadWeights { host: &self.uv, heads, out: m.v_head_dim }, uv_copy)
    }
}

#[cfg(test)]
mod tests {
    use super::head_rows;

    #[test]
    fn rope_rows_deinterleave_per_head() {
        assert_eq!(head_rows(0..2, 6, 2..6, true), vec![2, 4, 3, 5, 8, 10, 9, 11]);
        assert_eq!(head_rows(0..2, 6, 0..2, false), vec![0, 1, 6, 7]);
        assert_eq!(head_rows(0..1, 0, 3..5, false), vec![3, 4]);
        assert_eq!(head_rows(1..2, 6, 0..2, false), vec![6, 7]);
    }
}
