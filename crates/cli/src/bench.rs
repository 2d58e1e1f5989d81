//! `tensorfold bench`: prefill and decode tokens/s on a checkpoint, medians over repetitions.

use crate::args::BenchArgs;
use crate::device::{OnBackend, dispatch, threads};
use crate::exit::{Failure, failed, refused};
use serde_json::json;
use std::time::Instant;
use tf_backend::Backend;
use tf_engine::Runner;
use tf_models::Model;

struct Bench<'a>(&'a BenchArgs);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &x)| if x > row[best] { i } else { best })
}

impl OnBackend for Bench<'_> {
    type Out = ();
    fn run<B: Backend>(self, b: &B) -> Result<(), Failure> {
        let a = self.0;
        let m = Model::open(&a.model, b).map_err(refused)?;
        let rows = m.vocab.rows();
        let mut results = Vec::new();
        println!("model={} backend={} threads={}", a.model.display(), b.name(), threads(&a.dev));
        println!("{:>8} {:>8} {:>14} {:>14} {:>10}", "prompt", "gen", "prefill tok/s", "decode tok/s", "ttft ms");
        for len in crate::args::parse_ids(&a.prompt_len).map_err(refused)? {
            let len = usize::try_from(len).map_err(|_| refused("--prompt-len must be positive"))?.max(1);
            let raw: Vec<i64> = (0..len as i64).map(|i| (i * 7919 + 13) % rows as i64).collect();
            let prompt = m.vocab.check(&raw).map_err(failed)?;
            let (mut prefill, mut decode) = (Vec::new(), Vec::new());
            for _ in 0..a.repeat.max(1) {
                let mut runner = Runner::new(&m, b, len + a.gen_len).map_err(refused)?;
                let t = Instant::now();
                let mut logits = runner.prefill(&prompt, len, false);
                prefill.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let steps = a.gen_len.min(runner.room());
                for _ in 0..steps {
                    let id = m.vocab.sampled(argmax(&logits));
                    logits = runner.feed(&[id], false);
                }
                decode.push(t.elapsed().as_secs_f64() / steps.max(1) as f64);
            }
            let (p, d) = (median(prefill), median(decode));
            println!("{len:>8} {:>8} {:>14.1} {:>14.2} {:>10.1}", a.gen_len, len as f64 / p, 1.0 / d, p * 1e3);
            results.push(json!({"prompt_len": len, "gen_len": a.gen_len, "prefill_tok_s": len as f64 / p,
                "decode_tok_s": 1.0 / d, "ttft_ms": p * 1e3}));
        }
        if let Some(path) = &a.json {
            let doc = json!({"model": a.model, "backend": b.name(), "threads": threads(&a.dev),
                "architecture": m.decoder.spec.architecture, "results": results});
            std::fs::write(path, doc.to_string()).map_err(failed)?;
        }
        Ok(())
    }
}

/// Runs `bench`.
pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    dispatch(&a.dev, Bench(a))
}
