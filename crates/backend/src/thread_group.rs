//! The in-process tensor-parallel group: ranks as threads of one process, meeting at each
//! collective under one lock. Every rank hands in its part; the last to arrive publishes all
//! of them, and each rank sums them in rank order itself, so every rank gets the same bits.
//! A rank that leaves (its handle dropped before rank 0 closed the group), a collective that
//! waits past the timeout, or a rank that aborts breaks the group for all: no rank hangs.

use crate::collective::{Collective, GroupError};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One rank's handle on an in-process group.
pub struct ThreadGroup {
    shared: Arc<Shared>,
    rank: usize,
}

struct Shared {
    size: usize,
    /// How long a collective waits for the other ranks before the group is broken.
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// Collectives completed so far.
    generation: u64,
    /// This collective's parts, by rank.
    parts: Vec<Option<Vec<f32>>>,
    arrived: usize,
    /// The last completed collective's parts in rank order, or why it failed.
    done: Result<Arc<Vec<Vec<f32>>>, GroupError>,
    /// Plans not yet taken, by follower rank.
    plans: Vec<VecDeque<Vec<u8>>>,
    /// Rank 0 closed the group: followers stop after the plans already sent.
    closed: bool,
    broken: Option<String>,
}

impl ThreadGroup {
    /// The handles of a group of `size` ranks (rank order), whose collectives wait at most
    /// `timeout` for the others.
    pub fn new(size: usize, timeout: Duration) -> Vec<ThreadGroup> {
        let state = State {
            generation: 0,
            parts: vec![None; size],
            arrived: 0,
            done: Ok(Arc::default()),
            plans: vec![VecDeque::new(); size],
            closed: false,
            broken: None,
        };
        let shared = Arc::new(Shared { size, timeout, state: Mutex::new(state), changed: Condvar::new() });
        (0..size).map(|rank| ThreadGroup { shared: shared.clone(), rank }).collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands in `part` and returns every rank's, once all have (of one length where `same_len`:
    /// a sum's parts; a gather's may differ).
    fn exchange(&self, part: Vec<f32>, same_len: bool) -> Result<Arc<Vec<Vec<f32>>>, GroupError> {
        let mut st = self.lock();
        if let Some(why) = &st.broken {
            return Err(GroupError::Broken(why.clone()));
        }
        let generation = st.generation;
        st.parts[self.rank] = Some(part);
        st.arrived += 1;
        if st.arrived == self.shared.size {
            let parts: Vec<Vec<f32>> = st.parts.iter_mut().map(|p| p.take().unwrap_or_default()).collect();
            st.arrived = 0;
            st.generation += 1;
            st.done = match parts.iter().position(|p| same_len && p.len() != parts[0].len()) {
                Some(r) => {
                    let why = format!("rank {r} handed in {} values, rank 0 {}", parts[r].len(), parts[0].len());
                    st.broken = Some(why.clone());
                    Err(GroupError::Mismatch(why))
                }
                None => Ok(Arc::new(parts)),
            };
            self.shared.changed.notify_all();
            return st.done.clone();
        }
        let deadline = Instant::now() + self.shared.timeout;
        loop {
            // Completed: its result stands, whatever broke after (a rank leaving once done).
            if st.generation != generation {
                return st.done.clone();
            }
            if let Some(why) = &st.broken {
                return Err(GroupError::Broken(why.clone()));
            }
            if st.closed && self.rank != 0 {
                return Err(GroupError::Broken("rank 0 closed the group mid-collective".into()));
            }
            let now = Instant::now();
            if now >= deadline {
                let why = format!(
                    "rank {} waited {} s for the other ranks at a collective",
                    self.rank,
                    self.shared.timeout.as_secs_f32()
                );
                st.broken = Some(why.clone());
                self.shared.changed.notify_all();
                return Err(GroupError::Broken(why));
            }
            st = self.shared.changed.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Collective for ThreadGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn all_reduce(&self, x: &mut [f32]) -> Result<(), GroupError> {
        let parts = self.exchange(x.to_vec(), true)?;
        x.copy_from_slice(&parts[0]);
        for p in &parts[1..] {
            for (a, b) in x.iter_mut().zip(p) {
                *a += b;
            }
        }
        Ok(())
    }

    fn gather(&self, x: &[f32]) -> Result<Vec<Vec<f32>>, GroupError> {
        let parts = self.exchange(x.to_vec(), false)?;
        Ok(if self.rank == 0 { parts.to_vec() } else { Vec::new() })
    }

    fn send_plan(&self, plan: &[u8]) -> Result<(), GroupError> {
        if self.rank != 0 {
            return Err(GroupError::Mismatch(format!("rank {} sent a plan; only rank 0 plans", self.rank)));
        }
        let mut st = self.lock();
        if let Some(why) = &st.broken {
            return Err(GroupError::Broken(why.clone()));
        }
        for q in st.plans.iter_mut().skip(1) {
            q.push_back(plan.to_vec());
        }
        self.shared.changed.notify_all();
        Ok(())
    }

    fn recv_plan(&self) -> Result<Option<Vec<u8>>, GroupError> {
        if self.rank == 0 {
            return Err(GroupError::Mismatch("rank 0 waited for a plan; it makes them".into()));
        }
        let mut st = self.lock();
        loop {
            if let Some(why) = &st.broken {
                return Err(GroupError::Broken(why.clone()));
            }
            if let Some(p) = st.plans[self.rank].pop_front() {
                return Ok(Some(p));
            }
            if st.closed {
                return Ok(None);
            }
            st = self.shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn abort(&self, why: &str) {
        let mut st = self.lock();
        if st.broken.is_none() {
            st.broken = Some(format!("rank {}: {why}", self.rank));
        }
        self.shared.changed.notify_all();
    }
}

impl Drop for ThreadGroup {
    fn drop(&mut self) {
        let mut st = self.lock();
        if self.rank == 0 {
            st.closed = true;
        } else if !st.closed && st.broken.is_none() {
            st.broken = Some(format!("rank {} left the group", self.rank));
        }
        self.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Send>(size: usize, f: impl Fn(ThreadGroup) -> T + Sync) -> Vec<T> {
        let f = &f;
        std::thread::scope(|s| {
            let hs: Vec<_> =
                ThreadGroup::new(size, Duration::from_secs(20)).into_iter().map(|g| s.spawn(move || f(g))).collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
        })
    }

    #[test]
    fn all_reduce_sums_in_rank_order_with_the_same_bits_on_every_rank() {
        // 1e8 + 1 - 1e8 + ... is order-sensitive in f32: rank order fixes it.
        let vals = [1e8f32, 1.0, -1e8, 0.5];
        let out = run(4, |g| {
            let mut x = vec![vals[g.rank()]; 3];
            for _ in 0..50 {
                let mut y = x.clone();
                g.all_reduce(&mut y).expect("reduce");
                assert_eq!(y, vec![((vals[0] + vals[1]) + vals[2]) + vals[3]; 3]);
            }
            g.all_reduce(&mut x).expect("reduce");
            x
        });
        assert!(out.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn gather_hands_rank_0_every_part_in_rank_order() {
        let out = run(3, |g| g.gather(&[g.rank() as f32; 2]).expect("gather"));
        assert_eq!(out[0], vec![vec![0.0; 2], vec![1.0; 2], vec![2.0; 2]]);
        assert!(out[1].is_empty() && out[2].is_empty());
        // Parts of different lengths: a gather takes them as they are.
        let out = run(3, |g| g.gather(&vec![g.rank() as f32; g.rank()]).expect("gather"));
        assert_eq!(out[0], vec![vec![], vec![1.0], vec![2.0; 2]]);
    }

    #[test]
    fn plans_reach_every_follower_in_order_and_closing_ends_them() {
        let out = run(3, |g| {
            if g.rank() == 0 {
                g.send_plan(b"one").expect("send");
                g.send_plan(b"two").expect("send");
                drop(g);
                return Vec::new();
            }
            let mut got = Vec::new();
            while let Some(p) = g.recv_plan().expect("recv") {
                got.push(p);
            }
            got
        });
        assert_eq!(out[1], vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(out[2], out[1]);
    }

    #[test]
    fn a_rank_that_leaves_or_aborts_breaks_the_collectives_of_the_others() {
        let out = run(2, |g| {
            if g.rank() == 1 {
                return Ok(());
            }
            g.all_reduce(&mut [1.0])
        });
        assert!(matches!(&out[0], Err(GroupError::Broken(w)) if w.contains("rank 1 left")), "{out:?}");
        let out = run(2, |g| {
            if g.rank() == 1 {
                g.abort("plan refused");
                let _ = g.recv_plan();
                return Ok(());
            }
            g.all_reduce(&mut [1.0])
        });
        assert!(matches!(&out[0], Err(GroupError::Broken(w)) if w.contains("plan refused")), "{out:?}");
    }

    #[test]
    fn a_rank_that_never_arrives_times_the_collective_out() {
        let mut gs = ThreadGroup::new(2, Duration::from_millis(50));
        let _late = gs.pop();
        let g = gs.pop().expect("rank 0");
        let err = g.all_reduce(&mut [1.0]).expect_err("times out");
        assert!(matches!(err, GroupError::Broken(w) if w.contains("waited")));
    }

    #[test]
    fn sums_of_different_lengths_are_refused() {
        let out = run(2, |g| g.all_reduce(&mut vec![0.0; 1 + g.rank()]));
        assert!(out.iter().all(|r| r.is_err()), "{out:?}");
    }
}
