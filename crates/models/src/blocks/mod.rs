//! Decoder blocks: each a token mixer (attention; the recurrent kinds join here) and a channel
//! mixer (dense MLP or experts), each behind its norm, with the residual adds between them. A
//! family's spec names the kind of each layer; this module loads and runs them. A token mixer
//! kind is one file here, over `Backend` ops that every backend implements for that kind.

pub(crate) mod attention;
pub(crate) mod ffn;
pub(crate) mod gdn;
pub(crate) mod moe;
pub(crate) mod short_conv;

use crate::cache::CacheKind;
use crate::error::ModelError;
use crate::spec::{LayerKind, ModelSpec};
use crate::weights::Loader;
use attention::Attention;
use ffn::{Ffn, FfnIn};
use gdn::GatedDeltaNet;
use short_conv::ShortConvMixer;
use tf_backend::{AttnMeta, Backend, StateShape};

/// A layer's token mixer.
pub(crate) enum TokenMixer<B: Backend> {
    /// Attention over the paged KV cache.
    Attention(Attention<B>),
    /// Gated DeltaNet over a conv window and a delta-rule state.
    Gdn(GatedDeltaNet<B>),
    /// LFM2's double-gated short convolution over a conv window.
    ShortConv(ShortConvMixer<B>),
}

impl<B: Backend> TokenMixer<B> {
    /// The projections of the block's normed input the mixer reads, in the order `run` takes
    /// their outputs.
    fn inputs(&self) -> Vec<&B::Mat> {
        match self {
            TokenMixer::Attention(a) => [&a.q, &a.k, &a.v].into_iter().chain(a.gate.as_ref()).collect(),
            TokenMixer::Gdn(g) => vec![&g.qkv, &g.z, &g.b, &g.a],
            TokenMixer::ShortConv(c) => vec![&c.in_proj],
        }
    }

    /// The cache this mixer owns.
    pub(crate) fn cache(&self) -> CacheKind {
        match self {
            TokenMixer::Attention(a) => CacheKind::Kv(a.kv),
            TokenMixer::Gdn(g) => CacheKind::State(g.state),
            TokenMixer::ShortConv(c) => CacheKind::State(c.state),
        }
    }

    /// The shape of its state pool with `num_slots` slots, for a mixer that keeps state.
    pub(crate) fn state_shape(&self, num_slots: usize) -> Option<StateShape> {
        let _ = num_slots;
        match self {
            TokenMixer::Attention(_) => None,
            TokenMixer::Gdn(g) => Some(g.state_shape(num_slots)),
            TokenMixer::ShortConv(c) => Some(c.state_shape(num_slots)),
        }
    }

    /// Whether its ops read the host only through the round (no sliding window).
    pub(crate) fn replayable(&self) -> bool {
        match self {
            TokenMixer::Attention(a) => !a.sliding,
            TokenMixer::Gdn(_) => false,
            TokenMixer::ShortConv(_) => false,
        }
    }

    /// The mixer over its projected inputs: its output before the block's output projection.
    fn run(
        &self,
        b: &B,
        s: &ModelSpec,
        x: Vec<B::Act>,
        pos: &[u32],
        meta: &AttnMeta,
        cache: &mut Caches<'_, B>,
    ) -> B::Act {
        match self {
            TokenMixer::Attention(a) => {
                let mut x = x.into_iter();
                let (Some(q), Some(k), Some(v)) = (x.next(), x.next(), x.next()) else { unreachable!("q, k, v") };
                a.run(b, s, q, k, v, x.next(), pos, meta, &mut cache.kv[a.kv])
            }
            TokenMixer::Gdn(g) => {
                let x: [B::Act; 4] = x.try_into().unwrap_or_else(|_| unreachable!("four outputs"));
                g.run(b, s, x, meta, &mut cache.state[g.state])
            }
            TokenMixer::ShortConv(c) => {
                let [bcx]: [B::Act; 1] = x.try_into().unwrap_or_else(|_| unreachable!("one output"));
                c.run(b, &bcx, meta, &mut cache.state[c.state])
            }
        }
    }
}

/// The pools a round's layers write, borrowed from the decoder's `Cache`.
pub(crate) struct Caches<'a, B: Backend> {
    pub(crate) kv: &'a mut [B::Kv],
    #[allow(dead_code)] // read by the recurrent mixers
    pub(crate) state: &'a mut [B::State],
}

/// One decoder layer.
pub(crate) struct Block<B: Backend> {
    input_norm: B::Vec,
    /// The FFN's input norm, or with sandwich norms the norm of the mixer's output.
    post_mixer_norm: B::Vec,
    pre_ffn_norm: Option<B::Vec>,
    post_ffn_norm: Option<B::Vec>,
    pub(crate) mixer: TokenMixer<B>,
    /// The mixer's output projection back to the residual width.
    out: B::Mat,
    ffn: Ffn<B>,
}

/// Indices the next loaded layer's caches take.
#[derive(Default)]
pub(crate) struct CacheCounts {
    pub(crate) kv: usize,
    pub(crate) state: usize,
}

impl<B: Backend> Block<B> {
    /// Loads layer `i` (`model.layers.{i}.*`) of the kind the spec gives it.
    pub(crate) fn load(
        s: &ModelSpec,
        ld: &Loader<'_, B>,
        i: usize,
        n: &mut CacheCounts,
    ) -> Result<Block<B>, ModelError> {
        let p = format!("model.layers.{i}.");
        let norm = |name: &str| ld.vec(&format!("{p}{name}.weight"), s.hidden_size);
        let (mixer, out) = match s.layer_kinds[i] {
            LayerKind::Full | LayerKind::Sliding => {
                let (a, o) = Attention::load(s, ld, &p, i, n.kv)?;
                n.kv += 1;
                (TokenMixer::Attention(a), o)
            }
            LayerKind::GatedDeltaNet => {
                let g = s.gdn.ok_or_else(|| ModelError::Config {
                    file: Default::default(),
                    msg: format!("layer {i} is a Gated DeltaNet layer but the spec has no Gated DeltaNet settings"),
                })?;
                let (g, o) = GatedDeltaNet::load(s, ld, &p, g, n.state)?;
                n.state += 1;
                (TokenMixer::Gdn(g), o)
            }
            LayerKind::Conv => {
                let conv = s.conv.ok_or_else(|| ModelError::Config {
                    file: Default::default(),
                    msg: format!("layer {i} is a conv layer but the spec has no conv settings"),
                })?;
                let (c, o) = ShortConvMixer::load(s, ld, &p, conv, n.state)?;
                n.state += 1;
                (TokenMixer::ShortConv(c), o)
            }
        };
        Ok(Block {
            input_norm: norm(s.names.input_norm)?,
            post_mixer_norm: norm(s.names.post_mixer_norm)?,
            pre_ffn_norm: if s.sandwich_norms { Some(norm(s.names.pre_ffn_norm)?) } else { None },
            post_ffn_norm: if s.sandwich_norms { Some(norm(s.names.post_ffn_norm)?) } else { None },
            mixer,
            out,
            ffn: Ffn::load(s, ld, &p, i)?,
        })
    }

    /// The block over the residual stream `h`, into which the previous block's output `prev`
    /// (when it was not added yet) is added first; returns this block's channel-mixer output
    /// where it is not added into `h` here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        b: &B,
        s: &ModelSpec,
        h: &mut B::Act,
        prev: Option<B::Act>,
        pos: &[u32],
        meta: &AttnMeta,
        cache: &mut Caches<'_, B>,
    ) -> Option<B::Act> {
        let (eps, one_plus) = (s.rms_norm_eps, s.norm_one_plus);
        let ins = self.mixer.inputs();
        let x = match prev {
            Some(f) => b.matmul_many(&b.add_rms_norm(h, &f, &self.input_norm, eps, one_plus), &ins),
            None => b.norm_matmul_many(h, &self.input_norm, eps, one_plus, &ins),
        };
        let mixed = self.mixer.run(b, s, x, pos, meta, cache);
        // The FFN's input: norms of h after the mixer's output is added.
        let ffn_in = match &self.pre_ffn_norm {
            Some(pre) => {
                let a = b.rms_norm(&b.matmul(&mixed, &self.out), &self.post_mixer_norm, eps, one_plus);
                FfnIn::Normed(b.add_rms_norm(h, &a, pre, eps, one_plus))
            }
            None => {
                b.matmul_add(&mixed, &self.out, h);
                FfnIn::Residual(&self.post_mixer_norm)
            }
        };
        self.ffn.run(b, s, h, ffn_in, self.post_ffn_norm.as_ref())
    }
}
