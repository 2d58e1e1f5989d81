//! Tensor-parallel groups over a fixture, ranks as threads (`tf_models::tp`): rank 0's model
//! and engine, and TP = N against one rank within a stated tolerance.

use crate::{fixture, golden};
use std::time::Duration;
use tf_backend::Backend;
use tf_core::LoadProgress;
use tf_engine::Runner;
use tf_engine::engine::{EngineConfig, EngineHandle, spawn};
use tf_models::Model;
use tf_models::tp::{Followers, GroupShape, MakeBackend, open_group};

/// How long a collective waits for a rank in the tests.
const TIMEOUT: Duration = Duration::from_secs(120);

/// `family`'s fixture sharded over `shape`'s ranks (a count, or a [`GroupShape`]): rank 0's
/// model on `backend`, rank `r`'s on `make(r)` on its own thread.
pub fn tp_model<B: Backend + 'static>(
    backend: &B,
    make: &MakeBackend<B>,
    family: &str,
    shape: impl Into<GroupShape>,
) -> (Model<B>, Followers) {
    let shape = shape.into();
    open_group(&fixture(family), backend, &LoadProgress::default(), shape, make.clone(), TIMEOUT)
        .unwrap_or_else(|e| panic!("{family} at {shape:?}: {e}"))
}

/// An engine on rank 0 of `family` sharded over `shape`'s ranks (rank 0's backend `make(0)`).
pub fn tp_engine<B: Backend + 'static>(
    make: &MakeBackend<B>,
    family: &str,
    shape: impl Into<GroupShape>,
    cfg: EngineConfig,
) -> EngineHandle {
    let backend = make(0).unwrap_or_else(|e| panic!("rank 0's backend: {e}"));
    let (model, _followers) = tp_model(&backend, make, family, shape);
    spawn(model, backend, cfg).unwrap_or_else(|e| panic!("{family}: engine: {e}")).0
}

/// Every golden prompt's logits at `shape`'s ranks within `rel` of one rank's (relative to the
/// prompt's largest logit), and each row's greedy pick the same wherever one rank's top two
/// logits are further apart than twice the difference. Returns the largest relative difference.
pub fn check_tp_matches_one_rank<B: Backend + 'static>(
    make: &MakeBackend<B>,
    family: &str,
    shape: impl Into<GroupShape>,
    rel: f32,
) -> f32 {
    let shape = shape.into();
    let size = shape.size;
    let one_backend = make(0).unwrap_or_else(|e| panic!("backend: {e}"));
    let one = Model::open(&fixture(family), &one_backend).unwrap_or_else(|e| panic!("{family}: {e}"));
    let backend = make(0).unwrap_or_else(|e| panic!("backend: {e}"));
    let (tp, followers) = tp_model(&backend, make, family, shape);
    let vocab = one.vocab.rows();
    let mut worst = 0f32;
    for prompt in golden(&fixture(family)).prompts {
        let ids = one.vocab.check(&prompt).unwrap_or_else(|e| panic!("{family}: {e:?}"));
        let want = Runner::new(&one, &one_backend, ids.len()).expect("runner").prefill(&ids, ids.len(), true);
        let got = Runner::new(&tp, &backend, ids.len()).expect("runner").prefill(&ids, ids.len(), true);
        assert_eq!(got.len(), want.len(), "{family} at {size} ranks: logits shape");
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(f32::MIN_POSITIVE);
        let diff = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        worst = worst.max(diff / scale);
        assert!(diff <= rel * scale, "{family} at {size} ranks: logits differ by {diff} (scale {scale})");
        for (r, (g, w)) in got.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
            let mut sorted = w.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            if sorted[0] - sorted[1] > 2.0 * diff {
                assert_eq!(crate::argmax(g), crate::argmax(w), "{family} at {size} ranks: row {r}'s greedy pick");
            }
        }
    }
    assert!(tp.decoder.fault().is_none(), "{family}: {:?}", tp.decoder.fault());
    drop(tp);
    followers.join().unwrap_or_else(|e| panic!("{family}: a follower failed: {e}"));
    worst
}
