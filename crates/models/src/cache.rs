//! What a loaded decoder keeps per sequence between rounds: one paged KV pool per attention
//! layer and one pool of fixed-size state slots per recurrent layer, each layer's kind saying
//! which it owns (docs/architecture.md, "Layer kinds and caches").

use tf_backend::Backend;

/// The cache a layer owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    /// Paged K/V blocks that grow with the sequence: index into [`Cache::kv`].
    Kv(usize),
    /// Reads another layer's paged K/V, `Cache::kv[i]`, and owns no pool (Gemma 4's KV-shared
    /// layers).
    SharedKv(usize),
    /// One fixed-size slot per sequence: index into [`Cache::state`].
    State(usize),
    /// Nothing kept between rounds (a layer with no token mixer).
    Stateless,
}

/// Every layer's cache pools for one decoder.
pub struct Cache<B: Backend> {
    /// Paged KV pools, one per attention layer, in layer order.
    pub kv: Vec<B::Kv>,
    /// State pools, one per recurrent layer, in layer order.
    pub state: Vec<B::State>,
}

impl<B: Backend> Cache<B> {
    /// Whether any layer keeps per-sequence state (the engine then hands out state slots).
    pub fn has_state(&self) -> bool {
        !self.state.is_empty()
    }
}
