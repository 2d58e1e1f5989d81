//! The Gumbel-max race that draws a sampled token: `argmax(x_i + g_i)` over a row's kept
//! candidates, ties to the lowest id, `g_i` the Gumbel noise of `uniform(seed, position, id)`
//! (rng.rs). Candidates that cannot win are skipped, which never changes the answer: those
//! further than [`GUMBEL_BOUND`] below the best score get no draw, and a skip table rules out
//! most others from their uniform alone, without logarithms. The host's sampler and a CPU
//! backend drawing a row where its logits are (top_p_row.rs) run this same race.

use crate::logprobs::rank_value;
use crate::rng::{GUMBEL_BOUND, gumbel, uniform, uniform_block};
use crate::rng_lanes::uniform_blocks;

/// `argmax(x_i + g_i)` over the kept candidates (ids `ids`, scaled logits `x`; positions `kept`,
/// increasing, or every one for `None`), ties to the lowest id, with `g_i` Gumbel noise of
/// `uniform(seed, position, id)`. Candidates that cannot win are skipped, which never changes
/// the answer: those further than `GUMBEL_BOUND` below the best score get no draw at all.
pub fn gumbel_argmax(ids: &[u32], x: &[f32], kept: Option<&[u32]>, seed: u64, position: u64) -> u32 {
    // Start from the largest logit so the bounds prune from the first candidate on.
    let top = match kept {
        None if !x.is_empty() => argmax_ranked(x, 0..x.len() as u32),
        Some(at) if !at.is_empty() => argmax_ranked(x, at.iter().copied()),
        _ => return ids.first().copied().unwrap_or(0),
    };
    let top_noise = gumbel(uniform(seed, position, ids[top as usize]));
    let mut race = Race { best: (x[top as usize] + top_noise, ids[top as usize]), table: &SKIP_TABLE };
    let draw = Draw { ids, x, top, seed, position };
    match kept {
        None => draw.run_all(&mut race),
        Some(at) => draw.run(&mut race, at.iter().copied()),
    }
    race.best.1
}

/// The first of positions `ids` with the largest logit, NaN ranking lowest.
fn argmax_ranked(x: &[f32], mut ids: impl Iterator<Item = u32>) -> u32 {
    let first = ids.next().unwrap_or(0);
    ids.fold(first, |best, i| if rank_value(x[i as usize]) > rank_value(x[best as usize]) { i } else { best })
}

/// Steps per unit of score gap in the skip table.
const SKIP_STEPS: f32 = 4.0;
/// Entries of the skip table: gaps up to the Gumbel bound.
const SKIP_LEN: usize = (GUMBEL_BOUND * SKIP_STEPS) as usize;
/// Above this score magnitude f32 spacing nears the table's 1/4 margin: draw noise instead.
const SKIP_MAX_MAGNITUDE: f32 = 1e6;

/// `table[j]`: a uniform at or below it has Gumbel noise at most `j / SKIP_STEPS` (rounded
/// down, so the claim holds in f32 with room to spare).
fn skip_table() -> [f32; SKIP_LEN] {
    std::array::from_fn(|j| {
        let tau = (-(-(j as f64) / f64::from(SKIP_STEPS)).exp()).exp();
        let down = tau as f32;
        if f64::from(down) > tau { down.next_down() } else { down }
    })
}

/// The skip table, made once (every race reads it: a round's rows need not remake it).
static SKIP_TABLE: std::sync::LazyLock<[f32; SKIP_LEN]> = std::sync::LazyLock::new(skip_table);

/// A running Gumbel-max race: the best `(x_i + g_i, i)` so far.
struct Race {
    best: (f32, u32),
    table: &'static [f32; SKIP_LEN],
}

impl Race {
    /// Whether scaled logit `xi` can still win (NaN never can); if not, it needs no draw.
    #[inline]
    fn may_win(&self, xi: f32) -> bool {
        xi + GUMBEL_BOUND >= self.best.0
    }

    /// Enters id `i` with its uniform `u`. A uniform too small to close the gap (by the skip
    /// table: gap at least (j + 1) / 4, noise at most j / 4) needs no logarithms.
    #[inline]
    fn offer(&mut self, i: u32, xi: f32, u: f32) {
        // Truncation is floor here: only gaps of at least one step use the table.
        let steps = ((self.best.0 - xi) * SKIP_STEPS) as i32;
        if steps >= 1 && self.best.0.abs() < SKIP_MAX_MAGNITUDE {
            let j = (steps as usize - 1).min(SKIP_LEN - 1);
            if u <= self.table[j] {
                return;
            }
        }
        let score = xi + gumbel(u);
        if score > self.best.0 || (score == self.best.0 && i < self.best.1) {
            self.best = (score, i);
        }
    }
}

/// A race entered run by run with candidates of consecutive ids (a row drawn where it is:
/// top_p_row.rs), their uniforms drawn in bulk.
pub struct RowRace {
    race: Race,
    seed: u64,
    position: u64,
    blocks: Vec<[f32; 4]>,
    us: Vec<f32>,
    pass: Vec<bool>,
}

impl RowRace {
    /// Run length [`RowRace::enter_run`] takes at once (longer runs go a piece at a time).
    pub const RUN: usize = CHUNK;

    /// A race keyed by (`seed`, `position`) started from candidate `id` with scaled logit `x`.
    pub fn new(id: u32, x: f32, seed: u64, position: u64) -> RowRace {
        let race = Race { best: (x + gumbel(uniform(seed, position, id)), id), table: &SKIP_TABLE };
        let (blocks, us, pass) = (vec![[0.0; 4]; CHUNK / 4 + 2], vec![0.0; CHUNK], vec![false; CHUNK]);
        RowRace { race, seed, position, blocks, us, pass }
    }

    /// Enters ids `first .. first + xs.len()` whose `keep` is set (as long as `xs`), `xs` their
    /// scaled logits: the ones that may win and that the skip table does not rule out against
    /// the best score so far are offered.
    pub fn enter_run(&mut self, first: u32, xs: &[f32], keep: &[bool]) {
        for ((k, xs), keep) in (0u32..).step_by(CHUNK).zip(xs.chunks(CHUNK)).zip(keep.chunks(CHUNK)) {
            self.enter_piece(first + k, xs, keep);
        }
    }

    /// [`RowRace::enter_run`] of at most [`RowRace::RUN`] ids.
    fn enter_piece(&mut self, first: u32, xs: &[f32], keep: &[bool]) {
        let n = xs.len();
        if n == 0 {
            return;
        }
        let b0 = first / 4;
        let span = ((first + n as u32 - 1) / 4 - b0) as usize + 1;
        uniform_blocks(self.seed, self.position, b0, &mut self.blocks[..span]);
        let skip = (first - 4 * b0) as usize;
        self.us[..n].copy_from_slice(&self.blocks.as_flattened()[skip..skip + n]);
        survivors(self.race.best.0, xs, &self.us[..n], &mut self.pass[..n], self.race.table);
        for (k, (&p, &kept)) in self.pass[..n].iter().zip(keep).enumerate() {
            if p && kept {
                self.race.offer(first + k as u32, xs[k], self.us[k]);
            }
        }
    }

    /// The winning id.
    pub fn winner(&self) -> u32 {
        self.race.best.1
    }
}

/// Candidates gathered before their uniforms are drawn together.
const CHUNK: usize = 512;
/// Fewest gathered candidates worth drawing their blocks' uniforms in bulk.
const BULK_MIN: usize = 16;

/// One row's race inputs ([`gumbel_argmax`]).
struct Draw<'a> {
    ids: &'a [u32],
    x: &'a [f32],
    top: u32,
    seed: u64,
    position: u64,
}

impl Draw<'_> {
    /// Enters every candidate into `race`, a chunk of consecutive positions at a time: their
    /// uniforms drawn in bulk where their ids are dense, then those that may still win and that
    /// the skip table does not rule out (against the best score so far) offered. The top is
    /// offered again, which changes nothing.
    fn run_all(&self, race: &mut Race) {
        let mut blocks = vec![[0.0f32; 4]; 2 * CHUNK];
        let (mut us, mut pass) = ([0.0f32; CHUNK], [false; CHUNK]);
        for start in (0..self.ids.len()).step_by(CHUNK) {
            let end = (start + CHUNK).min(self.ids.len());
            let (ids, xs) = (&self.ids[start..end], &self.x[start..end]);
            let first = ids[0] / 4;
            let span = (ids[ids.len() - 1] / 4 - first) as usize + 1;
            if span > blocks.len() {
                self.run(race, start as u32..end as u32);
                continue;
            }
            uniform_blocks(self.seed, self.position, first, &mut blocks[..span]);
            let flat = blocks.as_flattened();
            let n = ids.len();
            for (&i, u) in ids.iter().zip(&mut us[..n]) {
                *u = flat[(i - 4 * first) as usize];
            }
            survivors(race.best.0, xs, &us[..n], &mut pass[..n], race.table);
            for (k, &i) in ids.iter().enumerate() {
                if pass[k] {
                    race.offer(i, xs[k], us[k]);
                }
            }
        }
    }

    /// Enters the candidates at positions `js` (increasing) into `race`, a chunk at a time: the
    /// ones that may still win are gathered, then their uniforms drawn, in bulk
    /// ([`tf_backend::rng_lanes`]) where their ids are dense, else a Philox block at a time.
    /// Offering a candidate the race has since outgrown changes nothing (its skip or its score
    /// says so), so the winner is the one-by-one race's.
    fn run(&self, race: &mut Race, mut js: impl Iterator<Item = u32>) {
        let mut chunk = [0u32; CHUNK];
        let mut blocks = vec![[0.0f32; 4]; 2 * CHUNK];
        loop {
            let mut n = 0;
            for j in js.by_ref() {
                if j != self.top && race.may_win(self.x[j as usize]) {
                    chunk[n] = j;
                    n += 1;
                    if n == CHUNK {
                        break;
                    }
                }
            }
            if n == 0 {
                return;
            }
            let chunk = &chunk[..n];
            let first = self.ids[chunk[0] as usize] / 4;
            let span = (self.ids[chunk[n - 1] as usize] / 4 - first) as usize + 1;
            if n >= BULK_MIN && span <= blocks.len() {
                uniform_blocks(self.seed, self.position, first, &mut blocks[..span]);
                let flat = blocks.as_flattened();
                let (mut xs, mut us, mut pass) = ([0.0f32; CHUNK], [0.0f32; CHUNK], [false; CHUNK]);
                for ((&j, x), u) in chunk.iter().zip(&mut xs).zip(&mut us) {
                    *x = self.x[j as usize];
                    *u = flat[(self.ids[j as usize] - 4 * first) as usize];
                }
                // Those the skip table rules out against the best score so far stay out of the
                // race: against a later, higher best it rules them out too.
                survivors(race.best.0, &xs[..n], &us[..n], &mut pass[..n], race.table);
                for (k, &j) in chunk.iter().enumerate() {
                    if pass[k] {
                        race.offer(self.ids[j as usize], xs[k], us[k]);
                    }
                }
            } else {
                let mut block = (u32::MAX, [0.0f32; 4]);
                for &j in chunk {
                    let i = self.ids[j as usize];
                    if block.0 != i / 4 {
                        block = (i / 4, uniform_block(self.seed, self.position, i / 4));
                    }
                    race.offer(i, self.x[j as usize], block.1[(i % 4) as usize]);
                }
            }
        }
    }
}

/// Marks `pass[k]` false where candidate `k` (scaled logit `xs[k]`, uniform `us[k]`) cannot win
/// against best score `best` ([`Race::may_win`]) or the skip table rules it out, as
/// [`Race::offer`] would, true elsewhere; in vector lanes where the CPU has them.
fn survivors(best: f32, xs: &[f32], us: &[f32], pass: &mut [bool], table: &[f32; SKIP_LEN]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F, the only feature the function is compiled for.
            return unsafe { survivors_avx512(best, xs, us, pass, table) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, the only feature the function is compiled for.
            return unsafe { survivors_avx2(best, xs, us, pass, table) };
        }
    }
    survivors_lanes(best, xs, us, pass, table)
}

/// [`survivors_lanes`] compiled for AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn survivors_avx512(best: f32, xs: &[f32], us: &[f32], pass: &mut [bool], table: &[f32; SKIP_LEN]) {
    survivors_lanes(best, xs, us, pass, table)
}

/// [`survivors_lanes`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn survivors_avx2(best: f32, xs: &[f32], us: &[f32], pass: &mut [bool], table: &[f32; SKIP_LEN]) {
    survivors_lanes(best, xs, us, pass, table)
}

/// [`survivors`], one candidate a lane.
#[inline(always)]
fn survivors_lanes(best: f32, xs: &[f32], us: &[f32], pass: &mut [bool], table: &[f32; SKIP_LEN]) {
    if best.abs() >= SKIP_MAX_MAGNITUDE || best.is_nan() {
        for (&x, p) in xs.iter().zip(pass) {
            *p = x + GUMBEL_BOUND >= best;
        }
        return;
    }
    for ((&x, &u), p) in xs.iter().zip(us).zip(pass) {
        let steps = ((best - x) * SKIP_STEPS) as i32;
        let j = (steps - 1).clamp(0, SKIP_LEN as i32 - 1) as usize;
        // Race::may_win, then the skip table (NaN never passes).
        *p = x + GUMBEL_BOUND >= best && !(steps >= 1 && u <= table[j]);
    }
}
