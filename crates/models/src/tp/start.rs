//! Starting an in-process tensor-parallel group: rank 0 loads its shard on the calling thread
//! (the engine runs it), each other rank on a thread of its own with a backend of its own,
//! reports its pools (which rank 0 checks and keeps for saved sessions), then follows rank 0's
//! plans until the group closes.

use super::blocks::check_peer;
use super::link::{Shard, TpLink};
use crate::error::ModelError;
use crate::loaded::Model;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::thread::JoinHandle;
use std::time::Duration;
use tf_backend::{Backend, ThreadGroup};
use tf_core::LoadProgress;

/// Makes rank `r`'s backend, on that rank's thread.
pub type MakeBackend<B> = Arc<dyn Fn(usize) -> Result<B, ModelError> + Send + Sync>;

/// The follower ranks' threads.
pub struct Followers {
    threads: Vec<JoinHandle<Result<(), ModelError>>>,
}

impl Followers {
    /// Waits for every follower (after rank 0's model is dropped, which closes the group); the
    /// first one's error, if any.
    pub fn join(self) -> Result<(), ModelError> {
        let mut first = Ok(());
        for t in self.threads {
            let r = t.join().unwrap_or_else(|_| {
                Err(ModelError::Backend(tf_backend::BackendError::Device("a follower rank's thread panicked".into())))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// How a group shards: its ranks, and whether the routed experts are split whole over them.
#[derive(Clone, Copy, Debug)]
pub struct GroupShape {
    /// Ranks.
    pub size: usize,
    /// Expert parallelism ([`Shard::expert_parallel`]).
    pub expert_parallel: bool,
}

impl From<usize> for GroupShape {
    /// `size` ranks, experts split by rows.
    fn from(size: usize) -> GroupShape {
        GroupShape { size, expert_parallel: false }
    }
}

impl Default for GroupShape {
    /// One rank.
    fn default() -> GroupShape {
        GroupShape { size: 1, expert_parallel: false }
    }
}

/// Loads `path` sharded over `shape.size` ranks as threads: rank 0 onto `backend` here, rank
/// `r` onto `make(r)` on its thread. Collectives wait at most `timeout` for a rank. Returns
/// rank 0's model and the followers once every rank has loaded; any rank's load error otherwise.
pub fn open_group<B: Backend + 'static>(
    path: &Path,
    backend: &B,
    progress: &LoadProgress,
    shape: GroupShape,
    make: MakeBackend<B>,
    timeout: Duration,
) -> Result<(Model<B>, Followers), ModelError> {
    let GroupShape { size, expert_parallel } = shape;
    // Sums on the devices where the backends can (every rank joins before it loads).
    let exchange = backend.new_exchange(size.max(1));
    let mut links: Vec<Arc<TpLink>> =
        ThreadGroup::new(size.max(1), timeout).into_iter().map(|g| TpLink::new(Box::new(g))).collect();
    let leader = links.remove(0);
    let (ready_tx, ready) = channel();
    let mut threads = Vec::new();
    for (i, link) in links.into_iter().enumerate() {
        let (rank, path, make, ready_tx) = (i + 1, PathBuf::from(path), make.clone(), ready_tx.clone());
        let exchange = exchange.clone();
        let spawned = std::thread::Builder::new().name(format!("tensorfold-rank-{rank}")).spawn(move || {
            let joined = |b: B| match &exchange {
                Some(ex) => b.join_exchange(ex, rank).map(|_| b).map_err(ModelError::Backend),
                None => Ok(b),
            };
            let loaded = make(rank).and_then(joined).and_then(|b| {
                Model::open_shard(&path, &b, &LoadProgress::default(), Shard { link: link.clone(), expert_parallel })
                    .map(|m| (b, m))
            });
            let (b, model) = match loaded {
                Ok(x) => x,
                Err(e) => {
                    link.group().abort(&format!("rank {rank} could not load: {e}"));
                    let _ = ready_tx.send(Err(e.to_string()));
                    return Err(e);
                }
            };
            let _ = ready_tx.send(Ok((rank, model.decoder.own_pools(&b))));
            drop(ready_tx);
            let mut out = Ok(());
            let mut body = || out = model.decoder.follow(&b);
            match b.home() {
                Some(home) => home(&mut body),
                None => body(),
            }
            out
        });
        threads.push(spawned.map_err(|e| ModelError::Backend(tf_backend::BackendError::Device(e.to_string())))?);
    }
    drop(ready_tx);
    let followers = Followers { threads };
    if let Some(ex) = &exchange {
        backend.join_exchange(ex, 0)?;
    }
    let model = Model::open_shard(path, backend, progress, Shard { link: leader.clone(), expert_parallel })?;
    // Each follower's pools, checked against rank 0's and kept for saved sessions (blocks.rs).
    let own = model.decoder.own_pools(backend);
    let mut peers = vec![None; size.saturating_sub(1)];
    for _ in 1..size {
        match ready.recv() {
            Ok(Ok((rank, pools))) => {
                check_peer(rank, &own, &pools).map_err(load_error)?;
                if let Some(p) = peers.get_mut(rank - 1) {
                    *p = Some(pools);
                }
            }
            Ok(Err(e)) => return Err(load_error(e)),
            Err(_) => return Err(load_error("a follower rank ended before it loaded".into())),
        }
    }
    leader.set_peer_pools(peers.into_iter().flatten().collect());
    Ok((model, followers))
}

fn load_error(msg: String) -> ModelError {
    ModelError::Backend(tf_backend::BackendError::Device(format!("tensor-parallel load: {msg}")))
}
