//! A tensor-parallel group as one rank sees it: sums and gathers of host rows in a fixed rank
//! order, and the round plans rank 0 sends the others. `ThreadGroup` (thread_group.rs) is the
//! in-process one, ranks as threads.

use std::any::Any;
use std::sync::Arc;
use thiserror::Error;

/// What a backend's ranks of one tensor-parallel group share to sum their rows on the devices
/// (`Backend::new_exchange`): opaque outside the backend that made it.
pub type Exchange = Arc<dyn Any + Send + Sync>;

/// The group can no longer run a collective.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GroupError {
    /// A rank left (its thread ended or refused a plan) or timed out; says which and why.
    #[error("tensor-parallel group broken: {0}")]
    Broken(String),
    /// Ranks disagreed on a collective's length.
    #[error("tensor-parallel ranks disagree: {0}")]
    Mismatch(String),
}

/// One rank's handle on its group.
pub trait Collective: Send + Sync {
    /// This rank, `0..size`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn size(&self) -> usize;
    /// Every rank's `x` summed elementwise in rank order (`((x0 + x1) + x2) + ...`): the same
    /// bits on every rank whatever the order the ranks arrive in.
    fn all_reduce(&self, x: &mut [f32]) -> Result<(), GroupError>;
    /// On rank 0, every rank's `x` (of any length) in rank order; on the others, nothing.
    fn gather(&self, x: &[f32]) -> Result<Vec<Vec<f32>>, GroupError>;
    /// Rank 0 hands `plan` to every other rank (in the order plans are sent).
    fn send_plan(&self, plan: &[u8]) -> Result<(), GroupError>;
    /// A follower's next plan, `None` once rank 0 has closed the group.
    fn recv_plan(&self) -> Result<Option<Vec<u8>>, GroupError>;
    /// Marks the group broken for every rank (a follower refusing a plan says why).
    fn abort(&self, why: &str);
}
