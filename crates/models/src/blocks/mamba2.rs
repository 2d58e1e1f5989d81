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
        // This rank's groups and their heads (all of them unsharded): rows of z and x by head,
        // of B and C by group, of dt by head.
        let (groups, hs) = (ld.part(m.n_groups), ld.part(heads));
        let (pd, gn) = (m.head_dim, m.state_size);
        let x_rows: Vec<usize> = (hs.start * pd..hs.end * pd).collect();
        let group_rows = |off: usize| (off + groups.start * gn..off + groups.end * gn).collect::<Vec<_>>();
        let xbc_channels = [x_rows.clone(), group_rows(inner), group_rows(inner + m.n_groups * gn)].concat();
        // in_proj's rows: z, then x B C, then dt.
        let (in_proj, rows) = (name("in_proj.weight"), inner + conv_dim + heads);
        let pick = |r: Vec<usize>| ld.mat_rows(&in_proj, rows, hidden, &r);
        let z = pick(x_rows.clone())?;
        let xbc = pick(xbc_channels.iter().map(|c| inner + c).collect())?;
        let dt = pick(hs.clone().map(|h| inner + conv_dim + h).collect())?;
        let k = m.conv_kernel;
        let (conv_weight, _) = ld.vec_channels(&name("conv1d.weight"), &[conv_dim, 1, k], &xbc_channels, k)?;
        let conv_bias = match m.conv_bias {
            true => Some(ld.vec_channels(&name("conv1d.bias"), &[conv_dim], &xbc_channels, 1)?.0),
            false => None,
        };
        let local = MambaSpec { num_heads: hs.len(), n_groups: groups.len(), ..m };
        let me = Mamba2 {
            z,
            xbc,
            dt,
            conv_weight,
            conv_bias,
            a_log: ld.vec_part(&name("A_log"), heads, 1, hs.clone())?,
            d: ld.vec_part(&name("D"), heads, 1, hs.clone())?,
            dt_bias: ld.vec_part(&name("dt_bias"), heads, 1, hs.clone())?,
            norm: ld.vec_part(&name("norm.weight"), inner, pd, hs.clone())?,
            m: local,
            eps: s.rms_norm_eps,
            state,
        };
        Ok((me, ld.mat_split_cols(&name("out_proj.weight"), hidden, inner, pd)?))
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
