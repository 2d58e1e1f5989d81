//! Resumed equals fresh: a prompt served partly from the prefix cache, or from a session saved by
//! one engine and restored into a new one, gives what a cold prefill gives, bit for bit.
//!
//! Prefix cache: prompts share a 50-id base's first 15, 16, 17, 31, 32, 33, 48 or 50 ids
//! (block-aligned and not, each with its own 3-id tail); after the base is cached, each alone and
//! all together equal an engine without a prefix cache, and the cache served at least 8 blocks.
//! Sessions: a 45-id prompt's two full blocks saved by one engine and restored into a new one
//! serve that prompt extended by 0, 1, 5 and 20 ids as a cold engine does, from restored blocks.

use crate::concurrent::assert_same;
use crate::{Output, Req, config, engine, mixed_request_for, ramp, run, run_each, ten_tokens};
use std::sync::atomic::Ordering;
use tf_backend::Backend;
use tf_engine::engine::{EngineConfig, EngineHandle};
use tf_engine::session::{self, confined_path};

/// Prompts sharing cached prefixes of 15 to 50 ids equal a cache-less engine's, alone and together.
pub fn check_prefix_resumed_equals_fresh<B: Backend + 'static>(
    new_backend: &dyn Fn() -> B,
    family: &str,
    seeded: bool,
) {
    let base: Vec<i64> = (0..50).map(|j| (j * 37 % 470) as i64).collect();
    let shared = [15usize, 16, 17, 31, 32, 33, 48, 50];
    let mut reqs: Vec<Req> = shared
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            let mut p = base[..len].to_vec();
            p.extend([(400 + k) as i64, 7, 9]);
            mixed_request_for(k, p, seeded)
        })
        .collect();
    reqs.push(mixed_request_for(99, base.clone(), seeded));
    let fresh = engine(new_backend, family, config(256, 256, 512, false));
    let want = run_each(&fresh, &reqs);
    let cached = engine(new_backend, family, config(256, 256, 7, true));
    run(&cached, &reqs[reqs.len() - 1..]);
    let got = run_each(&cached, &reqs);
    for ((r, g), w) in reqs.iter().zip(&got).zip(&want) {
        assert_same(g, w, &format!("{family} seeded={seeded}: sharing a prefix, {} ids", r.prompt.len()));
    }
    let hits = cached.stats.prefix_hit_tokens.load(Ordering::Relaxed);
    assert!(hits >= 16 * 8, "{family}: the cache was used ({hits} tokens)");
    // All together, sharing blocks while running.
    let together = run(&cached, &reqs);
    assert_eq!(together, want, "{family} seeded={seeded}: concurrent prefix sharing");
}

/// A session saved, then restored into a new engine, serves its extensions as a cold engine does.
pub fn check_session_restore_equals_fresh<B: Backend + 'static>(
    new_backend: &dyn Fn() -> B,
    family: &str,
    seed: Option<u64>,
) {
    check_session_restore_equals_fresh_on(&|cfg| engine(new_backend, family, cfg), family, seed);
}

/// [`check_session_restore_equals_fresh`] with engines from `open` (a tensor-parallel group's
/// rank 0, for one).
pub fn check_session_restore_equals_fresh_on(
    open: &dyn Fn(EngineConfig) -> EngineHandle,
    family: &str,
    seed: Option<u64>,
) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = confined_path(dir.path(), family).expect("a plain name is confined");
    let base = ramp(45, 1);
    let first = open(config(64, 256, 64, true));
    let ids = first.session_layout.vocab.check(&base).expect("ids inside the vocabulary");
    assert_eq!(first.save_session(ids, path.clone()), Ok(32), "{family}: saved two full blocks");
    first.shutdown();

    let restarted = open(config(64, 256, 64, true));
    let checked = session::read(&path, &restarted.session_layout).unwrap_or_else(|e| panic!("{family}: {e}"));
    assert_eq!(restarted.restore_session(checked), Ok(32), "{family}: restored two full blocks");
    let cold = open(config(64, 256, 64, false));
    for extra in [0usize, 1, 5, 20] {
        let mut p = base.clone();
        p.extend(ramp(extra, 3));
        let req = [ten_tokens(p, seed)];
        let (got, want): (Output, Output) = (run(&restarted, &req).remove(0), run(&cold, &req).remove(0));
        assert_same(&got, &want, &format!("{family} seed={seed:?}: restored session + {extra} ids"));
    }
    let hits = restarted.stats.prefix_hit_tokens.load(Ordering::Relaxed);
    assert!(hits >= 4 * 32, "{family}: restored blocks were used ({hits})");
}
