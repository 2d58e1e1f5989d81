//! The Gated DeltaNet token mixer (Qwen3-Next, Qwen3.5): q, k, v, z, b and a from the block's
//! normed input; a depthwise causal conv with SiLU over q, k and v; the gated delta rule over a
//! per-value-head `[Dk, Dv]` state; the gated RMSNorm `norm(o) * w * silu(z)` per value head;
//! then the block's `out_proj`. Its slot holds the conv window, then the delta-rule state.

use crate::error::ModelError;
use crate::spec::{GdnSpec, ModelSpec};
use crate::weights::Loader;
use tf_backend::{AttnMeta, Backend, Conv1d, Gdn, StateShape};

/// One layer's Gated DeltaNet: its input projections, conv kernel, decay and norm weights;
/// its state pool is `state`.
pub(crate) struct GatedDeltaNet<B: Backend> {
    /// `[2 Hk Dk + Hv Dv, hidden]`: q, k, v (each head block contiguous).
    pub(crate) qkv: B::Mat,
    /// `[Hv Dv, hidden]`: the norm's gate.
    pub(crate) z: B::Mat,
    /// `[Hv, hidden]`: beta before its sigmoid.
    pub(crate) b: B::Mat,
    /// `[Hv, hidden]`: the decay's input.
    pub(crate) a: B::Mat,
    conv: B::Vec,
    a_log: B::Vec,
    dt_bias: B::Vec,
    norm: B::Vec,
    spec: GdnSpec,
    /// Index of this layer's pool in `Cache::state`.
    pub(crate) state: usize,
}

/// Qwen3-Next's fused rows in the order the backend reads: per key head `g` the checkpoint's
/// `in_proj_qkvz` holds `[q (Dk), k (Dk), v (r Dv), z (r Dv)]` (`r = Hv / Hk`) and `in_proj_ba`
/// `[b (r), a (r)]`; returned as the rows of qkv (all q, all k, all v), z, b and a.
pub(crate) fn fused_rows(g: &GdnSpec) -> [Vec<usize>; 4] {
    let (hk, dk, dv) = (g.num_k_heads, g.head_k_dim, g.head_v_dim);
    let r = g.num_v_heads / hk;
    let per = 2 * dk + 2 * r * dv;
    let part = |off: usize, len: usize| (0..hk).flat_map(move |h| h * per + off..h * per + off + len).collect();
    let q: Vec<usize> = part(0, dk);
    let k: Vec<usize> = part(dk, dk);
    let v: Vec<usize> = part(2 * dk, r * dv);
    let z = part(2 * dk + r * dv, r * dv);
    let b = (0..hk).flat_map(|h| h * 2 * r..h * 2 * r + r).collect();
    let a = (0..hk).flat_map(|h| h * 2 * r + r..h * 2 * r + 2 * r).collect();
    [[q, k, v].concat(), z, b, a]
}

/// This rank's value heads and the key heads they read: the value heads split evenly, the key
/// heads too where the ranks divide them, else the one key head this rank's value heads share
/// (each key head then held by several ranks, as KV heads are).
pub(crate) fn shard_heads<B: Backend>(
    ld: &Loader<'_, B>,
    g: &GdnSpec,
) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let vh = ld.part(g.num_v_heads);
    let r = (g.num_v_heads / g.num_k_heads.max(1)).max(1);
    let kh = match ld.shard() {
        Some(sh) if g.num_k_heads < sh.size() => vh.start / r..vh.start / r + 1,
        _ => ld.part(g.num_k_heads),
    };
    (vh, kh)
}

impl<B: Backend> GatedDeltaNet<B> {
    /// Loads layer `{p}linear_attn.*` and its output projection `out_proj` (sharded: this rank's
    /// value heads and the key heads they read, `shard_heads`).
    pub(crate) fn load(
        s: &ModelSpec,
        ld: &Loader<'_, B>,
        p: &str,
        g: GdnSpec,
        state: usize,
    ) -> Result<(Self, B::Mat), ModelError> {
        let hidden = s.hidden_size;
        let (hv, vd) = (g.num_v_heads, g.num_v_heads * g.head_v_dim);
        let name = |n: &str| format!("{p}linear_attn.{n}");
        let ch = g.conv_channels();
        let (vh, kh) = shard_heads(ld, &g);
        // Every row of q, k, v, z, b and a in the order the backend reads (a fused checkpoint's
        // reordered), then this rank's of them.
        let [fq, fz, fb, fa] = fused_rows(&g);
        let (qkv_rows, z_rows) = match g.fused_inputs {
            true => (fq, fz),
            false => ((0..ch).collect(), (0..vd).collect()),
        };
        let (b_rows, a_rows) = match g.fused_ba {
            true => (fb, fa),
            false => ((0..hv).collect(), (0..hv).collect()),
        };
        let (qk, kd, dv) = (g.num_k_heads * g.head_k_dim, g.head_k_dim, g.head_v_dim);
        let pick = |rows: &[usize], range: std::ops::Range<usize>| rows[range].to_vec();
        let local_qkv = [
            pick(&qkv_rows, kh.start * kd..kh.end * kd),
            pick(&qkv_rows, qk + kh.start * kd..qk + kh.end * kd),
            pick(&qkv_rows, 2 * qk + vh.start * dv..2 * qk + vh.end * dv),
        ]
        .concat();
        let local_z = pick(&z_rows, vh.start * dv..vh.end * dv);
        let (local_b, local_a) = (pick(&b_rows, vh.clone()), pick(&a_rows, vh.clone()));
        let sharded = ld.shard().is_some();
        let (qkv, z) = if g.fused_inputs {
            let qkvz = name("in_proj_qkvz.weight");
            (ld.mat_rows(&qkvz, ch + vd, hidden, &local_qkv)?, ld.mat_rows(&qkvz, ch + vd, hidden, &local_z)?)
        } else if sharded {
            (
                ld.mat_rows(&name("in_proj_qkv.weight"), ch, hidden, &local_qkv)?,
                ld.mat_rows(&name("in_proj_z.weight"), vd, hidden, &local_z)?,
            )
        } else {
            (ld.mat(&name("in_proj_qkv.weight"), ch, hidden)?, ld.mat(&name("in_proj_z.weight"), vd, hidden)?)
        };
        let (b, a) = if g.fused_ba {
            let ba = name("in_proj_ba.weight");
            (ld.mat_rows(&ba, 2 * hv, hidden, &local_b)?, ld.mat_rows(&ba, 2 * hv, hidden, &local_a)?)
        } else if sharded {
            (
                ld.mat_rows(&name("in_proj_b.weight"), hv, hidden, &local_b)?,
                ld.mat_rows(&name("in_proj_a.weight"), hv, hidden, &local_a)?,
            )
        } else {
            (ld.mat(&name("in_proj_b.weight"), hv, hidden)?, ld.mat(&name("in_proj_a.weight"), hv, hidden)?)
        };
        // The conv is depthwise: this rank's channels are those of its q, k and v rows, in the
        // order the backend reads (q, k, v: the unfused checkpoint's channel order).
        let channels = [
            (kh.start * kd..kh.end * kd).collect::<Vec<_>>(),
            (qk + kh.start * kd..qk + kh.end * kd).collect(),
            (2 * qk + vh.start * dv..2 * qk + vh.end * dv).collect(),
        ]
        .concat();
        let (conv, _) = ld.vec_channels(&name("conv1d.weight"), &[ch, 1, g.conv_kernel], &channels, g.conv_kernel)?;
        let local = GdnSpec { num_k_heads: kh.len(), num_v_heads: vh.len(), ..g };
        let me = GatedDeltaNet {
            qkv,
            z,
            b,
            a,
            conv,
            a_log: ld.vec_part(&name("A_log"), hv, 1, vh.clone())?,
            dt_bias: ld.vec_part(&name("dt_bias"), hv, 1, vh.clone())?,
            norm: ld.vec(&name("norm.weight"), g.head_v_dim)?,
            spec: local,
            state,
        };
        Ok((me, ld.mat_split_cols(&name("out_proj.weight"), hidden, vd, dv)?))
    }

    /// The shape of its state pool: the conv window over q, k, v, then `[Hv, Dk, Dv]`.
    pub(crate) fn state_shape(&self, num_slots: usize) -> StateShape {
        let g = &self.spec;
        StateShape {
            num_slots,
            conv_channels: g.conv_channels(),
            conv_width: g.conv_kernel - 1,
            rec_len: g.num_v_heads * g.head_k_dim * g.head_v_dim,
        }
    }

    /// The mixer over its projections `[qkv, z, b, a]` of the normed input, before `out_proj`.
    pub(crate) fn run(&self, bk: &B, s: &ModelSpec, x: [B::Act; 4], meta: &AttnMeta, st: &mut B::State) -> B::Act {
        let [qkv, z, b, a] = x;
        let g = &self.spec;
        let conv = Conv1d { weight: &self.conv, bias: None, kernel: g.conv_kernel, silu: true };
        let mixed = bk.causal_conv1d(&qkv, &conv, st, meta);
        let p = Gdn {
            a_log: &self.a_log,
            dt_bias: &self.dt_bias,
            num_k_heads: g.num_k_heads,
            num_v_heads: g.num_v_heads,
            head_k_dim: g.head_k_dim,
            head_v_dim: g.head_v_dim,
            state_offset: g.conv_channels() * (g.conv_kernel - 1),
            tiled: g.tiled_v_heads,
        };
        let o = bk.gated_delta_rule(&mixed, &a, &b, &p, st, meta);
        bk.rms_norm_gated(&o, &z, &self.norm, s.rms_norm_eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_rows_take_every_row_once_in_head_order() {
        let g = GdnSpec {
            num_k_heads: 2,
            num_v_heads: 4,
            head_k_dim: 3,
            head_v_dim: 2,
            conv_kernel: 4,
            fused_inputs: true,
            fused_ba: true,
            tiled_v_heads: false,
        };
        let [qkv, z, b, a] = fused_rows(&g);
        // Per key head: q 3, k 3, v 2 * 2, z 2 * 2 = 14 rows.
        assert_eq!(&qkv[..6], &[0, 1, 2, 14, 15, 16]);
        assert_eq!(&qkv[6..12], &[3, 4, 5, 17, 18, 19]);
        assert_eq!(&qkv[12..], &[6, 7, 8, 9, 20, 21, 22, 23]);
        assert_eq!(z, vec![10, 11, 12, 13, 24, 25, 26, 27]);
        assert_eq!((b, a), (vec![0, 1, 4, 5], vec![2, 3, 6, 7]));
        let mut all: Vec<usize> = [qkv, z].concat();
        all.sort();
        assert_eq!(all, (0..28).collect::<Vec<_>>());
    }
}
