//! The fixtures' golden checks (transformers' float32 logits and greedy continuations, written
//! by scripts/make_fixtures.py), and chunked prefill == whole prefill, for any backend.

use std::path::Path;
use tf_backend::Backend;
use tf_engine::Runner;
use tf_formats::SafetensorsFile;
use tf_models::Model;

/// A fixture's golden data: prompts, their logits (every position) and greedy continuations.
pub struct Golden {
    /// Prompt ids.
    pub prompts: Vec<Vec<i64>>,
    /// Logits of every prompt position, row-major.
    pub logits: Vec<Vec<f32>>,
    /// Greedy continuation of each prompt.
    pub greedy: Vec<Vec<u32>>,
}

/// Reads `golden.json` and `golden.safetensors` of fixture directory `dir`.
pub fn golden(dir: &Path) -> Golden {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let file = SafetensorsFile::open(&dir.join("golden.safetensors")).unwrap();
    let prompts: Vec<Vec<i64>> = meta["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect())
        .collect();
    let logits = (0..prompts.len()).map(|i| file.tensor(&format!("logits_{i}")).unwrap().unwrap().to_f32()).collect();
    let greedy = (0..prompts.len())
        .map(|i| file.tensor(&format!("greedy_{i}")).unwrap().unwrap().to_f32().iter().map(|&v| v as u32).collect())
        .collect();
    Golden { prompts, logits, greedy }
}

/// Index of the first largest value.
pub fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &x)| if x > row[best] { i } else { best })
}

/// `family`'s logits on `b` within `tolerance(reference logits of a prompt)` of transformers', and
/// its greedy continuations equal.
pub fn check_golden<B: Backend>(b: &B, family: &str, tolerance: &dyn Fn(&[f32]) -> f32) {
    let dir = crate::fixture(family);
    let m = Model::open(&dir, b).unwrap_or_else(|e| panic!("{family}: {e}"));
    let g = golden(&dir);
    let rows = m.vocab.rows();
    for (i, raw) in g.prompts.iter().enumerate() {
        let ids = m.vocab.check(raw).unwrap();
        let mut r = Runner::new(&m, b, ids.len() + g.greedy[i].len()).unwrap();
        let logits = r.prefill(&ids, 512, true);
        assert_eq!(logits.len(), g.logits[i].len(), "{family} prompt {i}: logits size");
        let err = logits.iter().zip(&g.logits[i]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        let tol = tolerance(&g.logits[i]);
        eprintln!(
            "{family} [{}] prompt {i} ({} ids): max |logit err| = {err:.2e} (allowed {tol:.2e})",
            b.name(),
            ids.len()
        );
        assert!(err <= tol, "{family} prompt {i}: max logit error {err} > {tol}");
        let mut last = logits[logits.len() - rows..].to_vec();
        let mut ours = Vec::new();
        for _ in 0..g.greedy[i].len() {
            let id = m.vocab.sampled(argmax(&last));
            ours.push(id);
            last = r.feed(&[id], false);
        }
        assert_eq!(ours, g.greedy[i], "{family} prompt {i}: greedy continuation");
    }
}

/// Each family's longest golden prompt prefilled in chunks of 1, 3, 5 and 16 gives the whole
/// prefill's logits bit for bit.
pub fn check_chunked_equals_whole<B: Backend>(b: &B) {
    for family in crate::all_families() {
        let dir = crate::fixture(family);
        let m = Model::open(&dir, b).unwrap();
        let g = golden(&dir);
        let ids = m.vocab.check(g.prompts.last().unwrap()).unwrap();
        let whole = Runner::new(&m, b, ids.len()).unwrap().prefill(&ids, ids.len(), true);
        for chunk in [1, 3, 5, 16] {
            let chunked = Runner::new(&m, b, ids.len()).unwrap().prefill(&ids, chunk, true);
            let same =
                whole.len() == chunked.len() && whole.iter().zip(&chunked).all(|(a, c)| a.to_bits() == c.to_bits());
            assert!(same, "{family} chunk {chunk}");
        }
    }
}
