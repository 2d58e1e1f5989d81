//! Concurrent equals solo and drafted equals undrafted with an output constraint on: every
//! request carries a constraint whose allowed ids depend on the token before (ids `t` with
//! `(t + last) % 3 != 0`), so each row's mask differs by sequence and by position. The repetitive
//! requests run alone and all at once, undrafted and with n-gram drafting, and must give the same
//! tokens and logprobs every time; every token must be one its mask allowed.

use crate::{Output, Req, config, engine, repetitive_request};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use tf_backend::{Backend, TokenMask};
use tf_engine::constraint::Constraint;
use tf_engine::engine::{DraftConfig, DraftKind, EngineConfig, EngineHandle, Event, GenRequest};

/// Requests per check.
const NUM_REQUESTS: usize = 10;

/// The test constraint: after `last`, ids `t` with `(t + last) % 3 != 0` (at the start, `last`
/// is 0).
pub struct ModThree {
    taken: Vec<u32>,
    width: usize,
}

impl ModThree {
    /// At the start, over a vocabulary `width` ids wide.
    pub fn new(width: usize) -> ModThree {
        ModThree { taken: Vec::new(), width }
    }

    /// Whether `t` may follow `last`.
    pub fn allows(last: u32, t: u32) -> bool {
        !(t as u64 + last as u64).is_multiple_of(3)
    }

    fn last(&self) -> u32 {
        self.taken.last().copied().unwrap_or(0)
    }
}

impl Constraint for ModThree {
    fn mask(&mut self) -> TokenMask {
        let last = self.last();
        TokenMask::from_ids(self.width, (0..self.width as u32).filter(|&t| ModThree::allows(last, t)))
    }
    fn accept(&mut self, token: u32) -> bool {
        let ok = ModThree::allows(self.last(), token);
        if ok {
            self.taken.push(token);
        }
        ok
    }
    fn rollback(&mut self, n: usize) {
        self.taken.truncate(self.taken.len().saturating_sub(n));
    }
    fn is_finished(&self) -> bool {
        false
    }
}

/// Submits `reqs` at once, each with a fresh [`ModThree`], and collects their outputs.
pub fn run_constrained(h: &EngineHandle, reqs: &[Req]) -> Vec<Output> {
    let vocab = h.session_layout.vocab;
    let rxs: Vec<_> = reqs
        .iter()
        .map(|r| {
            let (tx, rx) = channel();
            let req = GenRequest {
                prompt: vocab.check(&r.prompt).expect("test prompts are inside the vocabulary"),
                params: r.params.clone(),
                max_tokens: r.max_tokens,
                stop_ids: vocab.check(&[]).expect("no stop ids"),
                ignore_eos: true,
                top_logprobs: r.top_logprobs,
                prompt_logprobs: None,
                sink: Box::new(move |e| tx.send(e).is_ok()),
                cancel: Arc::new(AtomicBool::new(false)),
                draft: r.draft,
                constraint: Some(Box::new(ModThree::new(vocab.rows()))),
            };
            assert!(h.submit(req), "the engine has stopped");
            rx
        })
        .collect();
    rxs.into_iter()
        .map(|rx| {
            let mut out = Vec::new();
            for e in rx {
                match e {
                    Event::Token(t) => out.push((t.id, t.logprob.map_or(crate::NO_LOGPROB, f32::to_bits))),
                    Event::Done { .. } => return out,
                    Event::Error(m) => panic!("{m}"),
                    Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
                }
            }
            panic!("the engine dropped a request without finishing it")
        })
        .collect()
}

/// The check (module docs) for `family`, greedy or seeded; returns the drafts accepted.
pub fn check_constrained_exact<B: Backend + 'static>(new_backend: &dyn Fn() -> B, family: &str, seeded: bool) -> u64 {
    let what = format!("{family} constrained seeded={seeded}");
    let reqs = |draft: bool| -> Vec<Req> { (0..NUM_REQUESTS).map(|i| repetitive_request(i, seeded, draft)).collect() };
    let plain = engine(new_backend, family, config(256, 128, 32, true));
    let each = |h: &EngineHandle, rs: &[Req]| -> Vec<Output> {
        rs.iter().map(|r| run_constrained(h, std::slice::from_ref(r)).remove(0)).collect()
    };
    let want = each(&plain, &reqs(false));
    for (i, out) in want.iter().enumerate() {
        assert_eq!(out.len(), reqs(false)[i].max_tokens, "{what}: request {i} ran to its length");
        let mut last = 0;
        for &(t, _) in out {
            assert!(ModThree::allows(last, t), "{what}: request {i}: {t} after {last} is outside its mask");
            last = t;
        }
    }
    assert_eq!(run_constrained(&plain, &reqs(false)), want, "{what}: concurrent");
    let cfg =
        EngineConfig { draft: DraftConfig { kind: DraftKind::Ngram, num_tokens: 5 }, ..config(256, 128, 32, true) };
    let spec = engine(new_backend, family, cfg);
    assert_eq!(each(&spec, &reqs(true)), want, "{what}: drafted, alone");
    assert_eq!(run_constrained(&spec, &reqs(true)), want, "{what}: drafted, concurrent");
    assert!(spec.stats.draft_proposed.load(Ordering::Relaxed) > 0, "{what}: drafts were proposed");
    spec.stats.draft_accepted.load(Ordering::Relaxed)
}
