//! The Mamba2 token mixer (Nemotron-H's `NemotronHMamba2Mixer`): `in_proj` to `[z, xBC, dt]`,
//! the depthwise causal conv over `xBC` with SiLU (`Backend::causal_conv1d`, its window first in
//! the layer's state slot), the SSD scan (`Backend::ssd_scan`, its `[H, P, N]` state after the
//! window), the grouped gated RMSNorm with `z` (`Backend::rms_norm_gated_grouped`), then
//! `out_proj`.

use crate::error::ModelError;
use crate::spec::{MambaSpec, ModelSpec};
use crate::weights::Loader;
use tf_backend::{AttnMeta, Backend, Conv1d, Ssd, StateShape};

/// One layer's Mamba2 mixer: its in-projection split three ways, conv, SSD parameters and norm;
/// its state pool is `state`.
pub(crate) struct Mamba2<B: Backend> {
    /// `in_proj`'s rows for `z`, `xBC` and `dt`.
    pub(crate) z: B::Mat,
    pub(crate) xbc: B::Mat,
    pub(crate) dt: B::Mat,
    conv_weight: B::Vec,
    conv_bias: Option<B::Vec>,
    a_log: B::Vec,
    d: B::Vec,
    dt_bias: B::Vec,
    norm: B::Vec,
    m: MambaSpec,
    eps: f32,
    /// Index of this layer's pool in `Cache::state`.
    pub(crate) state: usize,
}

impl<B: Backend> Mamba2<B> {
    /// Loads a Mamba2 mixer from module prefix `p` (`...layers.{i}.mixer.`) and its `out_proj`.
    pub(crate) fn load(
        s: &ModelSpec,
        ld: &Loader<'_, B>,
        p: &str,
        m: MambaSpec,
        state: usize,
    ) -> Result<(Self, B::Mat), ModelError> {
        let (hidden, heads, inner, conv_dim) = (s.hidden_size, m.num_heads, m.inner(), m.conv_dim());
        let name = |n: &str| format!("{p}{n}");
        // in_proj's rows: z, then x B C, then dt.
        let (in_proj, rows) = (name("in_proj.weight"), inner + conv_dim + heads);
        let part =
            |from: usize, len: usize| ld.mat_rows(&in_proj, rows, hidden, &(from..from + len).collect::<Vec<_>>());
        let (z, xbc, dt) = (part(0, inner)?, part(inner, conv_dim)?, part(inner + conv_dim, heads)?);
        let me = Mamba2 {
            z,
            xbc,
            dt,
            conv_weight: ld.vec_shaped(&name("conv1d.weight"), &[conv_dim, 1, m.conv_kernel])?.0,
            conv_bias: if m.conv_bias { Some(ld.vec(&name("conv1d.bias"), conv_dim)?) } else { None },
            a_log: ld.vec(&name("A_log"), heads)?,
            d: ld.vec(&name("D"), heads)?,
            dt_bias: ld.vec(&name("dt_bias"), heads)?,
            norm: ld.vec(&name("norm.weight"), inner)?,
            m,
            eps: s.rms_norm_eps,
            state,
        };
        Ok((me, ld.mat(&name("out_proj.weight"), hidden, inner)?))
    }

    /// Its state pool's shape with `num_slots` slots: the conv window over `xBC`, then the
    /// `[H, P, N]` scan state.
    pub(crate) fn state_shape(&self, num_slots: usize) -> StateShape {
        let m = &self.m;
        StateShape {
            num_slots,
            conv_channels: m.conv_dim(),
            conv_width: m.conv_kernel - 1,
            rec_len: m.num_heads * m.head_dim * m.state_size,
        }
    }

    /// The mixer over its projections `z`, `xBC` and `dt`, before `out_proj`.
    pub(crate) fn run(
        &self,
        b: &B,
        z: &B::Act,
        xbc: &B::Act,
        dt: &B::Act,
        meta: &AttnMeta,
        st: &mut B::State,
    ) -> B::Act {
        let m = &self.m;
        let conv =
            Conv1d { weight: &self.conv_weight, bias: self.conv_bias.as_ref(), kernel: m.conv_kernel, silu: true };
        let xbc = b.causal_conv1d(xbc, &conv, st, meta);
        let ssd = Ssd {
            a_log: &self.a_log,
            d: &self.d,
            dt_bias: &self.dt_bias,
            num_heads: m.num_heads,
            head_dim: m.head_dim,
            n_groups: m.n_groups,
            state_size: m.state_size,
            dt_min: m.dt_min,
            dt_max: m.dt_max,
            state_offset: m.conv_dim() * (m.conv_kernel - 1),
        };
        let y = b.ssd_scan(&xbc, dt, &ssd, st, meta);
        b.rms_norm_gated_grouped(&y, z, &self.norm, m.inner() / m.n_groups, self.eps)
    }
}
