//! Decoder blocks: each a token mixer (attention; the recurrent kinds join here) and a channel
//! mixer (dense MLP or experts), each behind its norm, with the residual adds between them. A
//! family's spec names the kind of each layer; this module loads and runs them. A token mixer
//! kind is one file here, over `Backend` ops that every backend implements for that kind.

pub(crate) mod attention;
pub(crate) mod dense_moe;
pub(crate) mod dsa_indexer;
pub(crate) mod ffn;
pub(crate) mod gdn;
pub(crate) mod indexer;
pub(crate) mod mamba2;
pub(crate) mod mla;
pub(crate) mod moe;
pub(crate) mod per_layer;
pub(crate) mod short_conv;

use crate::cache::CacheKind;
use crate::error::ModelError;
use crate::spec::{LayerKind, ModelSpec};
use crate::tp::TpLink;
use crate::weights::Loader;
use attention::Attention;
use ffn::{Ffn, FfnIn};
use gdn::GatedDeltaNet;
use mamba2::Mamba2;
use mla::Mla;
use short_conv::ShortConvMixer;
use std::sync::Arc;
use tf_backend::{AttnMeta, Backend, StateShape};

/// A layer's token mixer.
pub(crate) enum TokenMixer<B: Backend> {
    /// Attention over the paged KV cache.
    Attention(Attention<B>),
    /// Multi-head latent attention over a latent KV pool (DeepSeek V3), or DeepSeek sparse
    /// attention over the keys its indexer keeps (DeepSeek V3.2, GLM-5).
    Mla(Mla<B>),
    /// Gated DeltaNet over a conv window and a delta-rule state.
    Gdn(GatedDeltaNet<B>),
    /// Mamba2's SSD scan over a conv window and an `[H, P, N]` state.
    Mamba2(Mamba2<B>),
    /// LFM2's double-gated short convolution over a conv window.
    ShortConv(ShortConvMixer<B>),
}

impl<B: Backend> TokenMixer<B> {
    /// The projections of the block's normed input the mixer reads, in the order `run` takes
    /// their outputs.
    fn inputs(&self) -> Vec<&B::Mat> {
        match self {
            TokenMixer::Attention(a) => {
                let kv = a.kv_proj.iter().flat_map(|(k, v)| [k, v]);
                let index = a.indexer.iter().flat_map(|x| [&x.q, &x.k]);
                std::iter::once(&a.q).chain(kv).chain(a.gate.as_ref()).chain(index).collect()
            }
            TokenMixer::Mla(a) => a.inputs.iter().collect(),
            TokenMixer::Gdn(g) => vec![&g.qkv, &g.z, &g.b, &g.a],
            TokenMixer::Mamba2(m) => vec![&m.z, &m.xbc, &m.dt],
            TokenMixer::ShortConv(c) => vec![&c.in_proj],
        }
    }

    /// The cache this mixer owns.
    pub(crate) fn cache(&self) -> CacheKind {
        match self {
            TokenMixer::Attention(a) if a.source.is_some() => CacheKind::SharedKv(a.kv),
            TokenMixer::Attention(a) => CacheKind::Kv(a.kv),
            TokenMixer::Mla(a) => CacheKind::Kv(a.kv),
            TokenMixer::Gdn(g) => CacheKind::State(g.state),
            TokenMixer::Mamba2(m) => CacheKind::State(m.state),
            TokenMixer::ShortConv(c) => CacheKind::State(c.state),
        }
    }

    /// The shape of its state pool with `num_slots` slots, for a mixer that keeps state.
    pub(crate) fn state_shape(&self, num_slots: usize) -> Option<StateShape> {
        let _ = num_slots;
        match self {
            TokenMixer::Attention(_) | TokenMixer::Mla(_) => None,
            TokenMixer::Gdn(g) => Some(g.state_shape(num_slots)),
            TokenMixer::Mamba2(m) => Some(m.state_shape(num_slots)),
            TokenMixer::ShortConv(c) => Some(c.state_shape(num_slots)),
        }
    }

    /// Whether its ops read the host only through the round (no sliding window, no indexer; the
    /// recurrent kinds' slot tables are the round's).
    pub(crate) fn replayable(&self) -> bool {
        match self {
            TokenMixer::Attention(a) => !a.sliding && a.indexer.is_none(),
            TokenMixer::Mla(a) => !a.sparse(),
            TokenMixer::Gdn(_) | TokenMixer::Mamba2(_) | TokenMixer::ShortConv(_) => true,
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
                let Some(q) = x.next() else { unreachable!("q") };
                let kv = match &a.kv_proj {
                    Some(_) => {
                        let (Some(k), Some(v)) = (x.next(), x.next()) else { unreachable!("k, v") };
                        Some((k, v))
                    }
                    None => None,
                };
                let gate = a.gate.as_ref().and_then(|_| x.next());
                let index = match a.indexer {
                    Some(_) => {
                        let (Some(iq), Some(ik)) = (x.next(), x.next()) else { unreachable!("indexer q, k") };
                        Some((iq, ik))
                    }
                    None => None,
                };
                a.run(b, s, q, kv, gate, index, pos, meta, cache)
            }
            TokenMixer::Mla(a) => a.run(b, s, x, pos, meta, &mut cache.kv[a.kv]),
            TokenMixer::Gdn(g) => {
                let x: [B::Act; 4] = x.try_into().unwrap_or_else(|_| unreachable!("four outputs"));
                g.run(b, s, x, meta, &mut cache.state[g.state])
            }
            TokenMixer::Mamba2(m) => {
                let [z, xbc, dt]: [B::Act; 3] = x.try_into().unwrap_or_else(|_| unreachable!("three outputs"));
                m.run(b, &z, &xbc, &dt, meta, &mut cache.state[m.state])
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
    /// This round's K/V of each layer a KV-shared layer reads, by layer index.
    pub(crate) shared: Vec<Option<(B::Act, B::Act)>>,
}

/// One decoder layer: its first norm and its parts.
pub(crate) struct Block<B: Backend> {
    /// The token mixer's input norm (in a channel-only layer, the channel mixer's).
    input_norm: B::Vec,
    parts: Parts<B>,
    /// The group whose ranks sum this layer's row-parallel outputs, where it is sharded.
    tp: Option<Arc<TpLink>>,
}

/// `x w`, summed over the ranks first where `w` is a row-parallel shard (`tp`).
pub(crate) fn project<B: Backend>(b: &B, x: &B::Act, w: &B::Mat, tp: Option<&TpLink>) -> B::Act {
    let mut y = b.matmul(x, w);
    if let Some(tp) = tp {
        tp.all_reduce(b, &mut y);
    }
    y
}

/// `h += x w`, the product summed over the ranks first where `w` is a row-parallel shard
/// (unsharded, in the matmul's store: `Backend::matmul_add`).
pub(crate) fn project_add<B: Backend>(b: &B, x: &B::Act, w: &B::Mat, h: &mut B::Act, tp: Option<&TpLink>) {
    match tp {
        Some(_) => b.add_assign(h, &project(b, x, w, tp)),
        None => b.matmul_add(x, w, h),
    }
}

/// What a layer runs after its first norm.
enum Parts<B: Backend> {
    /// A token mixer, then a channel mixer behind its own norm.
    Pair {
        mixer: TokenMixer<B>,
        /// The mixer's output projection back to the residual width.
        out: B::Mat,
        /// The FFN's input norm, or with sandwich norms the norm of the mixer's output.
        post_mixer_norm: B::Vec,
        pre_ffn_norm: Option<B::Vec>,
        post_ffn_norm: Option<B::Vec>,
        ffn: Ffn<B>,
    },
    /// A token mixer alone, its projected output added into the residual (one-part layers).
    Mixer { mixer: TokenMixer<B>, out: B::Mat },
    /// A channel mixer alone (`LayerKind::ChannelOnly`).
    Channel(Ffn<B>),
}

/// Indices the next loaded layer's caches take.
#[derive(Default)]
pub(crate) struct CacheCounts {
    pub(crate) kv: usize,
    pub(crate) state: usize,
    /// The KV pool of each attention layer that owns one, by layer index.
    pub(crate) pools: std::collections::BTreeMap<usize, usize>,
}

impl<B: Backend> Block<B> {
    /// Loads layer `i` (`model.layers.{i}.*`, as `names.layers` says) of the kind the spec gives it.
    pub(crate) fn load(
        s: &ModelSpec,
        ld: &Loader<'_, B>,
        i: usize,
        n: &mut CacheCounts,
    ) -> Result<Block<B>, ModelError> {
        let p = format!("{}{i}.", s.names.layers);
        let norm = |name: &str| ld.vec(&format!("{p}{name}.weight"), s.hidden_size);
        let (mixer, out) = match s.layer_kinds[i] {
            LayerKind::Full if s.mla.is_some() => {
                let m = s.mla.unwrap_or_else(|| unreachable!("guarded"));
                let (a, o) = Mla::load(s, m, ld, &p, n.kv)?;
                n.kv += 1;
                (TokenMixer::Mla(a), o)
            }
            LayerKind::Full | LayerKind::Sliding => match s.kv_source(i) {
                Some(src) => {
                    let pool = n.pools.get(&src).copied().ok_or_else(|| ModelError::Config {
                        file: Default::default(),
                        msg: format!("layer {i} reads the K/V of layer {src}, which has no KV pool"),
                    })?;
                    let (a, o) = Attention::load(s, ld, &p, i, pool)?;
                    (TokenMixer::Attention(a), o)
                }
                None => {
                    let (a, o) = Attention::load(s, ld, &p, i, n.kv)?;
                    n.pools.insert(i, n.kv);
                    n.kv += 1;
                    (TokenMixer::Attention(a), o)
                }
            },
            LayerKind::GatedDeltaNet => {
                let g = s.gdn.ok_or_else(|| ModelError::Config {
                    file: Default::default(),
                    msg: format!("layer {i} is a Gated DeltaNet layer but the spec has no Gated DeltaNet settings"),
                })?;
                let (g, o) = GatedDeltaNet::load(s, ld, &p, g, n.state)?;
                n.state += 1;
                (TokenMixer::Gdn(g), o)
            }
            LayerKind::Mamba2 => {
                let m = s.mamba.ok_or_else(|| ModelError::Config {
                    file: Default::default(),
                    msg: format!("layer {i} is a Mamba2 layer but the spec has no Mamba2 settings"),
                })?;
                let (m, o) = Mamba2::load(s, ld, &format!("{p}mixer."), m, n.state)?;
                n.state += 1;
                (TokenMixer::Mamba2(m), o)
            }
            LayerKind::ChannelOnly if s.one_part_layers => {
                return Ok(Block {
                    input_norm: norm(s.names.input_norm)?,
                    parts: Parts::Channel(Ffn::load(s, ld, &p, i)?),
                    tp: ld.shard().map(|sh| sh.link.clone()),
                });
            }
            LayerKind::ChannelOnly => {
                return Err(ModelError::Config {
                    file: Default::default(),
                    msg: format!("layer {i} has no token mixer, which only one-part layers may"),
                });
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
        if s.one_part_layers {
            let tp = ld.shard().map(|sh| sh.link.clone());
            return Ok(Block { input_norm: norm(s.names.input_norm)?, parts: Parts::Mixer { mixer, out }, tp });
        }
        Ok(Block {
            input_norm: norm(s.names.input_norm)?,
            parts: Parts::Pair {
                mixer,
                out,
                post_mixer_norm: norm(s.names.post_mixer_norm)?,
                pre_ffn_norm: if s.sandwich_norms { Some(norm(s.names.pre_ffn_norm)?) } else { None },
                post_ffn_norm: if s.sandwich_norms { Some(norm(s.names.post_ffn_norm)?) } else { None },
                ffn: Ffn::load(s, ld, &p, i)?,
            },
            tp: ld.shard().map(|sh| sh.link.clone()),
        })
    }

    /// Its token mixer, where it has one.
    fn mixer(&self) -> Option<&TokenMixer<B>> {
        match &self.parts {
            Parts::Pair { mixer, .. } | Parts::Mixer { mixer, .. } => Some(mixer),
            Parts::Channel(_) => None,
        }
    }

    /// The cache this layer owns.
    pub(crate) fn cache(&self) -> CacheKind {
        self.mixer().map_or(CacheKind::Stateless, |m| m.cache())
    }

    /// The shape of its state pool with `num_slots` slots, for a layer that keeps state.
    pub(crate) fn state_shape(&self, num_slots: usize) -> Option<StateShape> {
        self.mixer().and_then(|m| m.state_shape(num_slots))
    }

    /// Whether its ops read the host only through the round.
    pub(crate) fn replayable(&self) -> bool {
        self.mixer().is_none_or(|m| m.replayable())
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
        let tp = self.tp.as_deref();
        let mixer = match &self.parts {
            Parts::Pair { mixer, .. } | Parts::Mixer { mixer, .. } => mixer,
            Parts::Channel(ffn) => {
                let input = match prev {
                    Some(f) => FfnIn::Normed(b.add_rms_norm(h, &f, &self.input_norm, eps, one_plus)),
                    None => FfnIn::Residual(&self.input_norm),
                };
                return ffn.run(b, s, h, input, None, tp);
            }
        };
        let ins = mixer.inputs();
        let x = match prev {
            Some(f) => b.matmul_many(&b.add_rms_norm(h, &f, &self.input_norm, eps, one_plus), &ins),
            None => b.norm_matmul_many(h, &self.input_norm, eps, one_plus, &ins),
        };
        let mixed = mixer.run(b, s, x, pos, meta, cache);
        // The output projection's bias (gpt-oss), added after it.
        let out_bias = match mixer {
            TokenMixer::Attention(a) => a.out_bias.as_ref(),
            _ => None,
        };
        let (out, post_mixer_norm, pre_ffn_norm, post_ffn_norm, ffn) = match &self.parts {
            Parts::Pair { out, post_mixer_norm, pre_ffn_norm, post_ffn_norm, ffn, .. } => {
                (out, post_mixer_norm, pre_ffn_norm, post_ffn_norm, ffn)
            }
            Parts::Mixer { out, .. } => {
                project_add(b, &mixed, out, h, tp);
                if let Some(bias) = out_bias {
                    b.add_bias(h, bias);
                }
                return None;
            }
            Parts::Channel(_) => unreachable!("returned above"),
        };
        // The FFN's input: norms of h after the mixer's output is added.
        let ffn_in = match pre_ffn_norm {
            Some(pre) => {
                let mut y = project(b, &mixed, out, tp);
                if let Some(bias) = out_bias {
                    b.add_bias(&mut y, bias);
                }
                let a = b.rms_norm(&y, post_mixer_norm, eps, one_plus);
                FfnIn::Normed(b.add_rms_norm(h, &a, pre, eps, one_plus))
            }
            None => {
                project_add(b, &mixed, out, h, tp);
                if let Some(bias) = out_bias {
                    b.add_bias(h, bias);
                }
                FfnIn::Residual(post_mixer_norm)
            }
        };
        ffn.run(b, s, h, ffn_in, post_ffn_norm.as_ref(), tp)
    }
}
