//! The engine's side of per-sequence state (models with recurrent layers): how many slots each
//! state pool gets, the slot copies the scheduler queues (snapshots, their restores, the scratch
//! save and put-back around drafts) run in order before each forward, and each round's slots.

use super::{Core, DraftKind, EngineConfig};
use crate::scheduler::RoundEntry;
use crate::state_pool::StateLayout;
use tf_backend::Backend;
use tf_models::Model;

/// The state slot layout an engine of `cfg` gives `model`; `None` when it keeps no state.
pub fn state_layout<B: Backend>(model: &Model<B>, cfg: &EngineConfig) -> Option<StateLayout> {
    let drafting = cfg.draft.kind != DraftKind::Off;
    (model.decoder.state_bytes_per_seq() > 0)
        .then(|| StateLayout::new(cfg.sched.max_num_seqs, drafting, cfg.sched.prefix_cache))
}

/// Bytes of state pools an engine of `cfg` allocates for `model` and its `draft_model` (a live
/// and a scratch slot per sequence); 0 without state. The KV cache's memory budget pays for them.
pub fn state_bytes<B: Backend>(model: &Model<B>, draft_model: Option<&Model<B>>, cfg: &EngineConfig) -> u64 {
    let target =
        state_layout(model, cfg).map_or(0, |l| l.num_slots() as u64 * model.decoder.state_bytes_per_seq() as u64);
    let draft =
        draft_model.map_or(0, |d| 2 * cfg.sched.max_num_seqs.max(1) as u64 * d.decoder.state_bytes_per_seq() as u64);
    target + draft
}

impl<B: Backend> Core<B> {
    /// Runs the state slot copies the scheduler queued, in order, on every state layer's pool.
    pub(super) fn apply_state_copies(&mut self) {
        let copies = self.sched.take_state_copies();
        self.model.decoder.copy_state(&self.backend, &mut self.cache, &copies);
    }

    /// The live state slot of each of `plan`'s sequences the scheduler holds, in order; empty
    /// when the model keeps no state.
    pub(super) fn state_slots(&self, plan: &[RoundEntry]) -> Vec<u32> {
        if !self.cache.has_state() {
            return Vec::new();
        }
        plan.iter().filter_map(|e| self.sched.seq(e.seq)).map(|s| s.state_slot.unwrap_or(0)).collect()
    }
}
