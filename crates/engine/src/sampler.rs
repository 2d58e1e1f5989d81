//! Logits to a token: logit bias, penalties, then greedy argmax or Gumbel-max over Philox noise
//! keyed by (seed, position), so a sampled token is a pure function of (logits, params, history,
//! seed, position): the same whether batched, drafted or not (docs/architecture.md, the four promises).
//!
//! The token is chosen from the row's candidates (tf_backend::candidates: the ids within a
//! window of the most likely one, [`query`]'s window being wide enough that no other id could
//! be drawn or weigh in top-p's mass; for a plain race, keyed by [`race_key`], the ids whose race
//! score is within a small margin of the best), so a backend may select them where the logits
//! are and send only those: [`sample_from`] gives the same token either way.

mod filter;
mod history;
mod logprobs;
mod params;

pub use filter::Kept;
pub use history::History;
pub use logprobs::Logprobs;
pub use params::{GREEDY_BELOW, ParamError, SamplingParams};

use crate::rng::{GUMBEL_BOUND, gumbel, uniform, uniform_block};
use filter::{TOP_P_WINDOW, kept, rank_value};
use tf_backend::candidates::select;
use tf_backend::rng_lanes::uniform_blocks;
use tf_backend::{Candidates, LogitEdit, RaceKey, RowQuery};

/// The window the Gumbel race needs: an id can win only if its scaled logit plus at most
/// `GUMBEL_BOUND` of noise passes the top id's plus at least -ln(-ln(2^-24)) = -2.81.
const RACE_WINDOW: f32 = 20.0;

/// Picks the next token of a sequence at `position`. `logits` (one row, as wide as the
/// embedding table) is overwritten with the biased, penalised values.
pub fn sample(logits: &mut [f32], params: &SamplingParams, history: &History, position: u64) -> u32 {
    apply_logit_bias(logits, &params.logit_bias);
    apply_penalties(logits, params, history);
    let candidates = select(logits, &base_query(params));
    sample_from(&candidates, logits.len(), params, position)
}

/// The query that selects a row's candidates for `params` with `history`'s penalties as edits,
/// for the token at `position` (a plain Gumbel race carries its key: [`race_key`]), or `None`
/// when `logit_bias` names an id twice (then only [`sample`] applies it).
pub fn query(params: &SamplingParams, history: &History, position: u64) -> Option<RowQuery> {
    let mut edits: std::collections::BTreeMap<u32, LogitEdit> = std::collections::BTreeMap::new();
    let blank = |id| LogitEdit { id, bias: None, seen: false, count: 0 };
    for &(id, bias) in &params.logit_bias {
        let e = edits.entry(id).or_insert_with(|| blank(id));
        if e.bias.replace(bias).is_some() {
            return None;
        }
    }
    if params.repetition_penalty != 1.0 {
        for id in history.seen_ids() {
            edits.entry(id).or_insert_with(|| blank(id)).seen = true;
        }
    }
    if params.frequency_penalty != 0.0 || params.presence_penalty != 0.0 {
        for (id, count) in history.generated_counts() {
            edits.entry(id).or_insert_with(|| blank(id)).count = count;
        }
    }
    let race = race_key(params, position);
    Some(RowQuery { edits: edits.into_values().collect(), race, ..base_query(params) })
}

/// The race key of the token at `position` when `params` sample it (not greedy): a backend may
/// then draw the row where the logits are, or for a plain race keep only the ids that can win
/// (tf_backend::candidates).
pub fn race_key(params: &SamplingParams, position: u64) -> Option<RaceKey> {
    (!params.is_greedy()).then_some(RaceKey { seed: params.seed, position })
}

/// The window that min-p's survivors need without top-p (whose mass needs the wider one): an
/// id passes when exp(x - max) >= min_p, so it lies within -ln(min_p) of the most likely; half a
/// logit more covers the roundings of the subtraction, the exponential and the threshold (up to
/// values of about 1e6), and no window needs more than the race's.
fn min_p_window(min_p: f32) -> f32 {
    (0.5 - min_p.ln()).min(RACE_WINDOW)
}

/// [`query`] without edits.
fn base_query(params: &SamplingParams) -> RowQuery {
    let greedy = params.is_greedy();
    // x / 1 == x exactly, so skipping the division changes nothing.
    let temperature = (!greedy && params.temperature != 1.0).then_some(params.temperature);
    let window = if greedy {
        0.0
    } else if params.top_p < 1.0 {
        TOP_P_WINDOW
    } else if params.min_p > 0.0 {
        min_p_window(params.min_p)
    } else {
        RACE_WINDOW
    };
    RowQuery {
        edits: Vec::new(),
        repetition_penalty: params.repetition_penalty,
        frequency_penalty: params.frequency_penalty,
        presence_penalty: params.presence_penalty,
        temperature,
        window,
        race: None,
        // A greedy row's ties need no filter.
        top_k: if greedy { 0 } else { params.top_k },
        top_p: if greedy { 1.0 } else { params.top_p },
        min_p: if greedy { 0.0 } else { params.min_p },
        mask: None,
    }
}

/// The token drawn from a row's candidates (selected by [`query`] from a row `width` wide, or
/// drawn by the backend: [`Candidates::settled`]).
pub fn sample_from(c: &Candidates, width: usize, params: &SamplingParams, position: u64) -> u32 {
    if params.is_greedy() {
        return c.ids.get(argmax(&c.values) as usize).copied().unwrap_or(0);
    }
    let scaled: Vec<f32>;
    let x = match params.temperature {
        1.0 => &c.values,
        t => {
            scaled = c.values.iter().map(|&v| v / t).collect();
            &scaled
        }
    };
    // A backend's draw left only survivors that hold the winner: race them all.
    let kept =
        if c.settled { Kept::All } else { kept(x, width, params.top_k, params.top_p, params.min_p, c.window_mass) };
    gumbel_argmax(&c.ids, x, &kept, params.seed, position)
}

/// Adds each bias to its id's logit (ids were checked at the boundary).
pub fn apply_logit_bias(logits: &mut [f32], logit_bias: &[(u32, f32)]) {
    for &(id, bias) in logit_bias {
        if let Some(x) = logits.get_mut(id as usize) {
            *x += bias;
        }
    }
}

/// Repetition penalty (HF / vLLM: over prompt and output, positive logits divided, others
/// multiplied), then frequency and presence penalties (OpenAI: over output only).
pub fn apply_penalties(logits: &mut [f32], params: &SamplingParams, history: &History) {
    let r = params.repetition_penalty;
    if r != 1.0 {
        for id in history.seen_ids() {
            if let Some(x) = logits.get_mut(id as usize) {
                *x = if *x > 0.0 { *x / r } else { *x * r };
            }
        }
    }
    let (frequency, presence) = (params.frequency_penalty, params.presence_penalty);
    if frequency != 0.0 || presence != 0.0 {
        for (id, count) in history.generated_counts() {
            if let Some(x) = logits.get_mut(id as usize) {
                // Two subtractions, as vLLM does them.
                *x -= frequency * count as f32;
                *x -= presence;
            }
        }
    }
}

/// Index of the largest logit; ties go to the lowest index, NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = (f32::NEG_INFINITY, 0u32);
    for (i, &x) in logits.iter().enumerate() {
        if x > best.0 {
            best = (x, i as u32);
        }
    }
    best.1
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

/// `argmax(x_i + g_i)` over the kept candidates (ids `ids`, scaled logits `x`), ties to the
/// lowest id, with `g_i` Gumbel noise of `uniform(seed, position, id)`. Candidates that cannot
/// win are skipped, which never changes the answer: those further than `GUMBEL_BOUND` below
/// the best score get no draw at all.
fn gumbel_argmax(ids: &[u32], x: &[f32], kept: &Kept, seed: u64, position: u64) -> u32 {
    // Start from the largest logit so the bounds prune from the first candidate on.
    let top = match kept {
        Kept::All if !x.is_empty() => argmax_ranked(x, 0..x.len() as u32),
        Kept::Only(at) if !at.is_empty() => argmax_ranked(x, at.iter().copied()),
        _ => return ids.first().copied().unwrap_or(0),
    };
    let top_noise = gumbel(uniform(seed, position, ids[top as usize]));
    let mut race = Race { best: (x[top as usize] + top_noise, ids[top as usize]), table: &SKIP_TABLE };
    let draw = Draw { ids, x, top, seed, position };
    match kept {
        Kept::All => draw.run_all(&mut race),
        Kept::Only(at) => draw.run(&mut race, at.iter().copied()),
    }
    race.best.1
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

#[cfg(test)]
mod sorted;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod threshold_tests;
