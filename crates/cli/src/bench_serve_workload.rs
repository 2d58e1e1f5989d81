//! `bench-serve`'s requests, all drawn from one seed before the run: lengths (fixed, uniform, or
//! a ShareGPT-shaped mix), random prompt ids, and Poisson arrival times.

/// SplitMix64: a small, seedable generator (the workload must not depend on a crate's version).
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5EED_BE4C_5E4E_0000)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        (-2.0 * self.unit().ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }
}

/// How lengths are drawn.
#[derive(Debug, Clone, Copy)]
pub enum Lengths {
    /// Uniform in [len * (1 - ratio), len * (1 + ratio)] (fixed at ratio 0).
    Random {
        /// Prompt tokens.
        input: usize,
        /// Output tokens.
        output: usize,
        /// Spread.
        ratio: f64,
    },
    /// Log-normal lengths shaped like ShareGPT's: medians about 110 prompt and 150 output
    /// tokens, long tails, each clipped to 4..=1024 (as vLLM filters that set); `output` fixes
    /// the outputs when given.
    ShareGpt {
        /// Output tokens of every request instead of the mix's.
        output: Option<usize>,
    },
}

/// One request of the run.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Output tokens asked for (`max_tokens`).
    pub output_len: usize,
    /// Seconds after the start at which it is sent (0 for all with an infinite rate).
    pub arrival: f64,
}

/// `n` requests: lengths from `lengths`, ids below `vocab`, arrivals at `rate` per second.
pub fn plan(n: usize, lengths: Lengths, vocab: usize, max_model_len: usize, rate: f64, seed: u64) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            let (input, output) = draw_lengths(&mut rng, lengths, max_model_len);
            let prompt = (0..input).map(|_| (rng.next_u64() % vocab.max(1) as u64) as u32).collect();
            if rate.is_finite() {
                t += -rng.unit().ln() / rate;
            }
            Planned { prompt, output_len: output, arrival: t }
        })
        .collect()
}

/// A request's (prompt, output) lengths; the mix's are cut to fit `max_model_len` with a token to
/// spare (a text prompt's BOS), the output to at most half of it (`random` lengths are the
/// caller's to check).
fn draw_lengths(rng: &mut Rng, lengths: Lengths, max_model_len: usize) -> (usize, usize) {
    match lengths {
        Lengths::Random { input, output, ratio } => (spread(rng, input, ratio), spread(rng, output, ratio)),
        Lengths::ShareGpt { output } => {
            let mut lognormal = |median: f64, sigma: f64| (median * (sigma * rng.normal()).exp()).round() as usize;
            let input = lognormal(110.0, 1.0).clamp(4, 1024);
            let output = output.unwrap_or(lognormal(150.0, 0.9).clamp(4, 1024)).clamp(1, (max_model_len / 2).max(1));
            (input.clamp(1, max_model_len.saturating_sub(output + 1).max(1)), output)
        }
    }
}

fn spread(rng: &mut Rng, len: usize, ratio: f64) -> usize {
    let lo = ((len as f64) * (1.0 - ratio)).floor().max(1.0) as usize;
    let hi = ((len as f64) * (1.0 + ratio)).ceil() as usize;
    rng.range(lo, hi.max(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_one_workload_and_lengths_as_asked() {
        let fixed = Lengths::Random { input: 16, output: 8, ratio: 0.0 };
        let a = plan(20, fixed, 100, 4096, f64::INFINITY, 3);
        assert!(a.iter().all(|p| p.prompt.len() == 16 && p.output_len == 8 && p.arrival == 0.0));
        assert!(a.iter().flat_map(|p| &p.prompt).all(|&id| id < 100));
        let b = plan(20, fixed, 100, 4096, f64::INFINITY, 3);
        assert!(a.iter().zip(&b).all(|(x, y)| x.prompt == y.prompt));
        assert_ne!(a[0].prompt, plan(1, fixed, 100, 4096, f64::INFINITY, 4)[0].prompt);
        let spread = plan(200, Lengths::Random { input: 100, output: 10, ratio: 0.5 }, 100, 4096, 1.0, 0);
        assert!(spread.iter().all(|p| (50..=150).contains(&p.prompt.len()) && (5..=15).contains(&p.output_len)));
        assert!(spread.iter().any(|p| p.prompt.len() != 100));
    }

    #[test]
    fn poisson_arrivals_average_the_rate() {
        let p = plan(4000, Lengths::Random { input: 1, output: 1, ratio: 0.0 }, 10, 64, 8.0, 1);
        assert!(p.windows(2).all(|w| w[1].arrival >= w[0].arrival));
        let rate = 4000.0 / p[3999].arrival;
        assert!((7.5..8.5).contains(&rate), "{rate}");
    }

    #[test]
    fn the_sharegpt_mix_has_a_long_tail_and_fits_the_context() {
        let p = plan(2000, Lengths::ShareGpt { output: None }, 1000, 4096, f64::INFINITY, 0);
        let mut inputs: Vec<usize> = p.iter().map(|r| r.prompt.len()).collect();
        inputs.sort_unstable();
        let median = inputs[1000];
        assert!((90..=130).contains(&median), "{median}");
        assert!(inputs[1999] > 600 && inputs[0] >= 4 && inputs[1999] <= 1024);
        let short = plan(50, Lengths::ShareGpt { output: Some(7) }, 1000, 100, f64::INFINITY, 0);
        assert!(short.iter().all(|r| r.prompt.len() + r.output_len < 100 && r.output_len <= 7));
    }
}
