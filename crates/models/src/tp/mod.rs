//! Tensor parallelism (Megatron-style): q, k, v and gate / up cut by rows (heads and
//! intermediate rows split across ranks), o and down cut by columns with their outputs summed
//! over the ranks in rank order, experts split by their intermediate rows (or, with expert
//! parallelism, whole experts split over the ranks), the head split by vocabulary rows and
//! gathered onto rank 0; embedding, norms and routers replicated. Rank 0
//! runs the engine and sends each round's plan (plan.rs) to the others, which check it and run
//! their shard (follow.rs); a saved session's blocks are read and written on every rank
//! (blocks.rs). `tf_backend::ThreadGroup` is the in-process group (start.rs).

mod blocks;
mod check;
mod follow;
mod link;
pub mod plan;
mod start;

pub use blocks::RankPools;
pub use check::check;
pub use link::{Shard, TpLink};
pub use plan::{Pass, Plan, RoundPlan};
pub use start::{Followers, GroupShape, MakeBackend, open_group};
