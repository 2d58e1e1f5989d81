//! How `tensorfold bench` picks a decode round's next token: the argmax on the device (greedy,
//! overlapped with the next round as the engine does, or `greedy-sync`, waited for each round),
//! or seeded sampling of every row, from whole rows downloaded to the host (`host`) or from the
//! candidates the backend selects (`candidates`, what an engine round does). The `-logprobs`
//! modes also give every row its top [`LOGPROBS_TOP`] logprobs: `host-logprobs` from the
//! downloaded rows (what an engine round with logprobs did before they moved to the backend),
//! `logprobs` from the backend where the logits are (what it does now). `mixed` samples a round
//! of mixed settings from the backend's candidates: of every four rows two greedy, one
//! temperature 0.8 + top-k 50 and one temperature 0.8 + top-p 0.95 (a server's traffic). Every
//! row is sampled; row 0's token feeds the next round.

use crate::exit::{Failure, refused};
use rayon::prelude::*;
use tf_backend::logprobs::row_logprobs;
use tf_backend::{Backend, LogprobQuery, RowQuery};
use tf_engine::sampler::{History, SamplingParams, query, race_key, sample, sample_from};

/// Where the next token comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PickMode {
    /// Argmax of row 0, the next round queued on it before it reaches the host (bench.rs).
    Greedy,
    /// Argmax of row 0, waited for before the next round is queued (only the ids cross on a GPU).
    GreedySync,
    /// Every row downloaded and sampled on the host.
    Host,
    /// Every row sampled from the backend's candidates.
    Candidates,
    /// [`PickMode::Host`] with every row's logprobs computed on the host.
    HostLogprobs,
    /// [`PickMode::Candidates`] with every row's logprobs from the backend.
    Logprobs,
    /// [`PickMode::Candidates`] over rows of mixed settings ([`mixed_params`]).
    Mixed,
}

/// Alternatives the `-logprobs` modes ask for a row.
pub const LOGPROBS_TOP: usize = 5;

impl PickMode {
    /// The modes of a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<PickMode>, Failure> {
        s.split(',')
            .map(|m| match m.trim() {
                "greedy" => Ok(PickMode::Greedy),
                "greedy-sync" => Ok(PickMode::GreedySync),
                "host" => Ok(PickMode::Host),
                "candidates" => Ok(PickMode::Candidates),
                "host-logprobs" => Ok(PickMode::HostLogprobs),
                "logprobs" => Ok(PickMode::Logprobs),
                "mixed" => Ok(PickMode::Mixed),
                other => Err(refused(format!(
                    "--sample: unknown mode {other:?} (greedy, greedy-sync, host, candidates, host-logprobs, logprobs, mixed)"
                ))),
            })
            .collect()
    }

    /// The mode's name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PickMode::Greedy => "greedy",
            PickMode::GreedySync => "greedy-sync",
            PickMode::Host => "host",
            PickMode::Candidates => "candidates",
            PickMode::HostLogprobs => "host-logprobs",
            PickMode::Logprobs => "logprobs",
            PickMode::Mixed => "mixed",
        }
    }
}

/// Picks tokens round after round and counts the candidates it saw.
pub struct Picker {
    mode: PickMode,
    params: SamplingParams,
    history: History,
    /// Rows sampled from candidates, and their candidates in all.
    pub rows: u64,
    /// Candidates over those rows.
    pub candidates: u64,
    /// Seconds spent drawing tokens from candidates on the host.
    pub draw_s: f64,
    /// The log-sum-exps the backend gave (kept so the work is not optimised away).
    pub lse_sum: f64,
}

impl Picker {
    /// A picker for `mode` sampling with `params` (row `r` seeded with `params.seed + r`).
    pub fn new(mode: PickMode, params: SamplingParams) -> Picker {
        Picker { mode, params, history: History::default(), rows: 0, candidates: 0, draw_s: 0.0, lse_sum: 0.0 }
    }

    /// The mode.
    pub fn mode(&self) -> PickMode {
        self.mode
    }

    /// Row 0's next token of `logits` (`batch` rows as wide as the vocabulary) at `position`.
    pub fn pick<B: Backend>(&mut self, b: &B, logits: &mut B::Act, batch: usize, position: u64) -> usize {
        let params = |r: usize| SamplingParams { seed: self.params.seed.wrapping_add(r as u64), ..self.params.clone() };
        match self.mode {
            PickMode::Greedy | PickMode::GreedySync => b.argmax_rows(logits).first().copied().unwrap_or(0) as usize,
            PickMode::Host | PickMode::HostLogprobs => {
                let (_, cols) = b.shape(logits);
                let mut host = b.download(logits);
                let (history, lp) = (&self.history, self.mode == PickMode::HostLogprobs);
                let q = LogprobQuery { row: 0, top_n: LOGPROBS_TOP, ids: Vec::new() };
                // In parallel over rows, as the engine samples a round's rows.
                let ids: Vec<(u32, f64)> = host
                    .par_chunks_mut(cols.max(1))
                    .take(batch)
                    .enumerate()
                    .map(|(r, row)| {
                        let lse = if lp { row_logprobs(row, &q).lse } else { 0.0 };
                        (sample(row, &params(r), history, position), lse)
                    })
                    .collect();
                ids.first().map_or(0, |t| t.0 as usize)
            }
            PickMode::Candidates | PickMode::Logprobs | PickMode::Mixed => {
                if self.mode == PickMode::Logprobs {
                    let qs: Vec<LogprobQuery> =
                        (0..batch).map(|row| LogprobQuery { row, top_n: LOGPROBS_TOP, ids: Vec::new() }).collect();
                    let got = b.logprobs(logits, &qs);
                    self.lse_sum += got.iter().map(|r| r.lse).sum::<f64>();
                }
                let (_, cols) = b.shape(logits);
                let mixed = self.mode == PickMode::Mixed;
                let params = |r: usize| if mixed { mixed_params(r) } else { params(r) };
                let Some(q) = query(&self.params, &self.history, position) else { return 0 };
                let rows: Vec<usize> = (0..batch).collect();
                // Each row's own seed, so its race key too.
                let qs: Option<Vec<_>> = (0..batch)
                    .map(|r| match mixed {
                        true => query(&params(r), &self.history, position),
                        false => Some(RowQuery { race: race_key(&params(r), position), ..q.clone() }),
                    })
                    .collect();
                let Some(qs) = qs else { return 0 };
                let all = b.sample_candidates(logits, &rows, &qs);
                self.rows += all.len() as u64;
                self.candidates += all.iter().map(|c| c.ids.len() as u64).sum::<u64>();
                let t = std::time::Instant::now();
                let ids: Vec<u32> = b.install(|| {
                    all.par_iter().enumerate().map(|(r, c)| sample_from(c, cols, &params(r), position)).collect()
                });
                self.draw_s += t.elapsed().as_secs_f64();
                ids.first().copied().unwrap_or(0) as usize
            }
        }
    }
}

/// Row `r`'s settings in a [`PickMode::Mixed`] round: of every four rows two greedy, one
/// temperature 0.8 + top-k 50, one temperature 0.8 + top-p 0.95 (seeded by row).
pub fn mixed_params(r: usize) -> SamplingParams {
    let sampled = SamplingParams { temperature: 0.8, seed: r as u64, ..SamplingParams::default() };
    match r % 4 {
        2 => SamplingParams { top_k: 50, ..sampled },
        3 => SamplingParams { top_p: 0.95, ..sampled },
        _ => SamplingParams { temperature: 0.0, ..sampled },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_rounds_hold_greedy_top_k_and_top_p_rows() {
        assert_eq!(PickMode::parse_list("greedy, mixed").ok(), Some(vec![PickMode::Greedy, PickMode::Mixed]));
        assert_eq!(PickMode::Mixed.name(), "mixed");
        let kinds: Vec<(bool, u32, f32)> =
            (0..8).map(mixed_params).map(|p| (p.is_greedy(), p.top_k, p.top_p)).collect();
        assert_eq!(&kinds[..4], &[(true, 0, 1.0), (true, 0, 1.0), (false, 50, 1.0), (false, 0, 0.95)]);
        assert_eq!(kinds[..4], kinds[4..]);
        assert!((0..8).all(|r| mixed_params(r).validate().is_ok()));
    }
}
