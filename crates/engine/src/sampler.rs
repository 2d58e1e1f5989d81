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

use filter::{TOP_P_WINDOW, kept};
use tf_backend::candidates::select;
use tf_backend::race;
use tf_backend::{Candidates, LogitEdit, RaceKey, RowQuery};

/// The window the Gumbel race needs: an id can win only if its scaled logit plus at most
/// `GUMBEL_BOUND` of noise passes the top id's plus at least -ln(-ln(2^-24)) = -2.81.
const RACE_WINDOW: f32 = 20.0;

/// Picks the next token of a sequence at `position`. `logits` (one row, as wide as the
/// embedding table) is overwritten with the biased, penalised values.
pub fn sample(logits: &mut [f32], params: &SamplingParams, history: &History, position: u64) -> u32 {
    apply_logit_bias(logits, &params.logit_bias);
    for &id in params.suppressed(history.generated().len()) {
        if let Some(x) = logits.get_mut(id as usize) {
            *x += f32::NEG_INFINITY;
        }
    }
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
    // Before `min_tokens`: the suppressed ids' bias is -inf (over any logit_bias of theirs).
    for &id in params.suppressed(history.generated().len()) {
        edits.entry(id).or_insert_with(|| blank(id)).bias = Some(f32::NEG_INFINITY);
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

/// `argmax(x_i + g_i)` over the kept candidates (ids `ids`, scaled logits `x`), ties to the
/// lowest id, with `g_i` Gumbel noise of `uniform(seed, position, id)` (tf_backend race.rs).
fn gumbel_argmax(ids: &[u32], x: &[f32], kept: &Kept, seed: u64, position: u64) -> u32 {
    let at = match kept {
        Kept::All => None,
        Kept::Only(at) => Some(at.as_slice()),
    };
    race::gumbel_argmax(ids, x, at, seed, position)
}

#[cfg(test)]
mod sorted;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod threshold_tests;
