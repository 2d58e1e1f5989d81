//! Times the host's sampling path on one flat row as wide as Qwen3's vocabulary (what a
//! random-weight checkpoint gives): the candidates a backend selects (`candidates`), then the
//! draw from them (`sample_from`), for greedy, top-p 0.95 and top-k 50 at temperature 0.8.
//! `cargo run --release -p tf-engine --example sample_speed [rows]`

use std::time::Instant;
use tf_engine::sampler::{History, SamplingParams, query, sample_from};

fn main() {
    let rows: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let width = 151_936;
    // A flat row: logits spread over about two units, as a random-weight model gives.
    let row: Vec<f32> = (0..width).map(|i| tf_engine::rng::uniform(5, 0, i as u32) * 2.0).collect();
    let history = History::default();
    for (name, top_p, top_k) in [("greedy", 1.0, 0), ("top-p 0.95", 0.95, 0), ("top-k 50", 1.0, 50)] {
        let params = SamplingParams {
            temperature: if name == "greedy" { 0.0 } else { 0.8 },
            top_p,
            top_k,
            seed: 7,
            ..SamplingParams::default()
        };
        let (mut select_s, mut draw_s, mut kept) = (0.0, 0.0, 0);
        for r in 0..rows {
            let mut x = row.clone();
            let t = Instant::now();
            let q = query(&params, &history, r as u64);
            let c = match &q {
                Some(q) => tf_backend::candidates::candidates(&mut x, q),
                None => tf_backend::Candidates { ids: (0..width as u32).collect(), values: x, ..Default::default() },
            };
            select_s += t.elapsed().as_secs_f64();
            let t = Instant::now();
            std::hint::black_box(sample_from(&c, width, &params, r as u64));
            draw_s += t.elapsed().as_secs_f64();
            kept += c.ids.len();
        }
        let ms = |s: f64| s * 1e3 / rows as f64;
        println!(
            "{name:>11}: candidates {:7.3} ms a row, draw {:7.3} ms a row ({} candidates a row)",
            ms(select_s),
            ms(draw_s),
            kept / rows
        );
    }
}
