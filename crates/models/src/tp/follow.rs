//! A follower rank's loop: take each plan rank 0 sends, check it against this rank's model and
//! pools, and run it on this rank's shard. A plan it refuses breaks the group (rank 0 then
//! reads the fault and ends) and ends the loop with the reason; it never panics on one.

use super::plan::{Bounds, Pass, Plan, PlanError};
use crate::cache::Cache;
use crate::decoder::{Batch, Decoder};
use crate::error::ModelError;
use tf_backend::Backend;

impl<B: Backend> Decoder<B> {
    /// Runs the plans of rank 0 until it closes the group (`Ok`), or the group breaks or a plan
    /// is refused (the error). A decoder loaded without a shard, or rank 0's, has no plans to follow.
    pub fn follow(&self, b: &B) -> Result<(), ModelError> {
        let Some(link) = self.tp_link().filter(|l| !l.is_leader()).cloned() else {
            return Err(refused("only a follower rank's decoder follows plans"));
        };
        let mut pools: Option<(Cache<B>, (usize, usize, usize))> = None;
        loop {
            let bytes = match link.group().recv_plan() {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return Ok(()),
                Err(e) => return Err(refused(&e.to_string())),
            };
            let bounds = Bounds {
                vocab: self.spec.vocab_size,
                num_layers: self.spec.num_layers,
                max_position: self.spec.max_position_embeddings,
                pools: pools.as_ref().map(|p| p.1),
            };
            let plan = match Plan::decode(&bytes, &bounds) {
                Ok(p) => p,
                Err(PlanError(why)) => {
                    let why = format!("rank {} refused a round plan: {why}", link.group().rank());
                    link.group().abort(&why);
                    return Err(refused(&why));
                }
            };
            match plan {
                Plan::Alloc { num_blocks, block_size, num_slots } => {
                    drop(pools.take());
                    match self.alloc_cache(b, num_blocks, block_size, num_slots) {
                        Ok(c) => pools = Some((c, (num_blocks, block_size, num_slots))),
                        Err(e) => {
                            link.group()
                                .abort(&format!("rank {} could not allocate its pools: {e}", link.group().rank()));
                            return Err(e);
                        }
                    }
                }
                Plan::CopyState(copies) => {
                    let Some((cache, _)) = pools.as_mut() else { unreachable!("decode refuses a copy before Alloc") };
                    self.copy_state(b, cache, &copies);
                }
                Plan::ReadBlocks { blocks, slot } => {
                    let Some((cache, _)) = pools.as_ref() else { unreachable!("decode refuses a read before Alloc") };
                    self.follow_read(b, cache, &blocks, slot);
                }
                Plan::WriteBlocks { blocks, slot, parts } => {
                    let Some((cache, (_, block_size, _))) = pools.as_mut() else {
                        unreachable!("decode refuses a write before Alloc")
                    };
                    let rank = link.group().rank();
                    if let Err(why) = self.follow_write(b, cache, *block_size, &blocks, slot, &parts, rank) {
                        let why = format!("rank {rank} refused a block write: {why}");
                        link.group().abort(&why);
                        return Err(refused(&why));
                    }
                }
                Plan::Round(r) => {
                    let Some((cache, _)) = pools.as_mut() else { unreachable!("decode refuses a round before Alloc") };
                    let meta = r.meta();
                    let batch = Batch { ids: &r.ids, held: None, meta: &meta, logits_rows: &r.logits_rows };
                    match r.pass {
                        Pass::Full => drop(self.run_pass(b, &batch, cache, self.spec.num_layers)),
                        Pass::Layers(n) => drop(self.run_pass(b, &batch, cache, n)),
                        Pass::Hidden => drop(self.run_hidden(b, &batch, cache)),
                    }
                }
            }
            if let Some(f) = self.fault() {
                return Err(refused(&f));
            }
        }
    }
}

fn refused(msg: &str) -> ModelError {
    ModelError::Backend(tf_backend::BackendError::Device(msg.to_string()))
}
