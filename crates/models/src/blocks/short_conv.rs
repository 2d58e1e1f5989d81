//! The short convolution token mixer (LFM2's `Lfm2ShortConv`): `in_proj` to `[B, C, x]`, the
//! double-gated depthwise causal conv `C * conv(B * x)` over the sequence's conv window
//! (`Backend::short_conv`), then `out_proj`. Its state slot holds the last `kernel - 1` values
//! of `B * x`.

use crate::error::ModelError;
use crate::spec::{ConvSpec, ModelSpec};
use crate::weights::Loader;
use tf_backend::{AttnMeta, Backend, ShortConv, StateShape};

/// One layer's short conv: its in-projection, conv taps and shape; its state pool is `state`.
pub(crate) struct ShortConvMixer<B: Backend> {
    pub(crate) in_proj: B::Mat,
    weight: (B::Vec, Vec<f32>),
    bias: Option<(B::Vec, Vec<f32>)>,
    kernel: usize,
    channels: usize,
    /// Index of this layer's pool in `Cache::state`.
    pub(crate) state: usize,
}

impl<B: Backend> ShortConvMixer<B> {
    /// Loads layer `i`'s short conv (`{p}conv.*`) and its output projection `out_proj`
    /// (sharded: this rank's channels of B, C and x, of the conv, and of `out_proj`'s columns).
    pub(crate) fn load(
        s: &ModelSpec,
        ld: &Loader<'_, B>,
        p: &str,
        conv: ConvSpec,
        state: usize,
    ) -> Result<(Self, B::Mat), ModelError> {
        let ch = s.hidden_size;
        let name = |n: &str| format!("{p}conv.{n}");
        let part = ld.part(ch);
        let in_proj = match ld.shard() {
            None => ld.mat(&name("in_proj.weight"), 3 * ch, ch)?,
            Some(_) => {
                let rows: Vec<usize> = (0..3).flat_map(|k| part.clone().map(move |c| k * ch + c)).collect();
                ld.mat_rows(&name("in_proj.weight"), 3 * ch, ch, &rows)?
            }
        };
        let channels: Vec<usize> = part.clone().collect();
        let weight = ld.vec_channels(&name("conv.weight"), &[ch, 1, conv.kernel], &channels, conv.kernel)?;
        let bias = match conv.bias {
            true => Some(ld.vec_channels(&name("conv.bias"), &[ch], &channels, 1)?),
            false => None,
        };
        let me = ShortConvMixer { in_proj, weight, bias, kernel: conv.kernel, channels: part.len(), state };
        Ok((me, ld.mat_split_cols(&name("out_proj.weight"), ch, ch, 1)?))
    }

    /// Its state pool's shape with `num_slots` slots: a window of `kernel - 1` rows, nothing after.
    pub(crate) fn state_shape(&self, num_slots: usize) -> StateShape {
        StateShape { num_slots, conv_channels: self.channels, conv_width: self.kernel - 1, rec_len: 0 }
    }

    /// The gated conv of the in-projection `bcx`, before `out_proj`.
    pub(crate) fn run(&self, b: &B, bcx: &B::Act, meta: &AttnMeta, st: &mut B::State) -> B::Act {
        let conv = ShortConv {
            weight: &self.weight.0,
            bias: self.bias.as_ref().map(|x| &x.0),
            host_weight: &self.weight.1,
            host_bias: self.bias.as_ref().map(|x| &x.1[..]),
            kernel: self.kernel,
        };
        b.short_conv(bcx, &conv, st, meta)
    }
}
