//! Sampling candidates: the ids of a logits row that can still decide a sampled token, so a
//! device can hand the host a few hundred values instead of a whole row. A row is first edited
//! (logit bias, then repetition, frequency and presence penalties, each id on its own), then
//! every id whose value divided by the temperature lies within `window` of the largest such
//! value is a candidate. The rule is written with single IEEE operations (one add, divide,
//! multiply or subtract at a time) so a device computes the same set with the same values.

/// The edits of one id before sampling, applied in this order: bias, repetition penalty,
/// frequency penalty, presence penalty (the host sampler's order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitEdit {
    /// The id (checked at the boundary or made by the engine).
    pub id: u32,
    /// Added first, when present.
    pub bias: Option<f32>,
    /// Whether the repetition penalty touches this id (it is in the prompt or the output).
    pub seen: bool,
    /// Times the id was generated (frequency and presence penalties touch it when above 0).
    pub count: u32,
}

/// How one row's candidates are chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct RowQuery {
    /// Edits, at most one per id, in increasing id order.
    pub edits: Vec<LogitEdit>,
    /// Divides positive logits of seen ids and multiplies the others; 1 is off.
    pub repetition_penalty: f32,
    /// Times a generated id's count, subtracted; 0 is off.
    pub frequency_penalty: f32,
    /// Subtracted from every generated id; 0 is off.
    pub presence_penalty: f32,
    /// Divides every value before the window is measured; `None` leaves values as they are.
    pub temperature: Option<f32>,
    /// Candidates lie within this much of the largest scaled value (0: its ties only).
    pub window: f32,
}

impl RowQuery {
    /// The same query without edits (for a row whose edits were applied already).
    pub fn without_edits(&self) -> RowQuery {
        RowQuery { edits: Vec::new(), ..self.clone() }
    }

    /// `x` after `e`'s edits, one rounded operation at a time.
    #[inline]
    pub fn edited(&self, e: &LogitEdit, mut x: f32) -> f32 {
        if let Some(b) = e.bias {
            x += b;
        }
        let r = self.repetition_penalty;
        if e.seen && r != 1.0 {
            x = if x > 0.0 { x / r } else { x * r };
        }
        let (f, p) = (self.frequency_penalty, self.presence_penalty);
        if e.count > 0 && (f != 0.0 || p != 0.0) {
            x -= f * e.count as f32;
            x -= p;
        }
        x
    }

    /// `x` as the window measures it.
    #[inline]
    pub fn scaled(&self, x: f32) -> f32 {
        match self.temperature {
            Some(t) => x / t,
            None => x,
        }
    }
}

/// A row's candidates: ids in increasing order and their edited (unscaled) values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidates {
    /// Candidate ids, increasing.
    pub ids: Vec<u32>,
    /// Their edited logits, before the temperature.
    pub values: Vec<f32>,
}

/// Applies `q`'s edits to `row` in place (ids past the row are left alone).
pub fn apply_edits(row: &mut [f32], q: &RowQuery) {
    for e in &q.edits {
        if let Some(x) = row.get_mut(e.id as usize) {
            *x = q.edited(e, *x);
        }
    }
}

/// The scaled threshold of an edited row, or `None` when its largest value (NaN ranking
/// lowest) is not finite: then every id is a candidate.
pub fn threshold(row: &[f32], q: &RowQuery) -> Option<f32> {
    // NaN ranks below every number; scaling is monotone, so the scaled max is the max scaled.
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    let max = q.scaled(max);
    max.is_finite().then_some(max - q.window)
}

/// The candidates of an already edited row under `q` (its edits are not applied again).
pub fn select(row: &[f32], q: &RowQuery) -> Candidates {
    let mut c = Candidates::default();
    match threshold(row, q) {
        Some(t) => {
            for (i, &x) in row.iter().enumerate() {
                if q.scaled(x) >= t {
                    c.ids.push(i as u32);
                    c.values.push(x);
                }
            }
        }
        None => {
            c.ids = (0..row.len() as u32).collect();
            c.values = row.to_vec();
        }
    }
    c
}

/// Edits `row` in place and returns its candidates.
pub fn candidates(row: &mut [f32], q: &RowQuery) -> Candidates {
    apply_edits(row, q);
    select(row, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(window: f32, temperature: Option<f32>) -> RowQuery {
        RowQuery {
            edits: Vec::new(),
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            temperature,
            window,
        }
    }

    #[test]
    fn window_keeps_values_near_the_max_after_scaling() {
        let mut row = vec![1.0, 5.0, 4.0, f32::NAN, 2.9, 5.0];
        let c = candidates(&mut row, &query(1.0, Some(0.5)));
        // Scaled: 2, 10, 8, NaN, 5.8, 10: within 1 of 10 are ids 1 and 5.
        assert_eq!(c.ids, [1, 5]);
        let c = candidates(&mut row, &query(2.0, None));
        assert_eq!(c.ids, [1, 2, 5]);
        assert_eq!(c.values, [5.0, 4.0, 5.0]);
    }

    #[test]
    fn edits_apply_in_the_host_order_and_can_raise_an_id() {
        let mut q = query(0.0, None);
        q.repetition_penalty = 2.0;
        q.frequency_penalty = 0.5;
        q.presence_penalty = 0.25;
        q.edits = vec![
            LogitEdit { id: 0, bias: Some(10.0), seen: true, count: 2 },
            LogitEdit { id: 2, bias: None, seen: true, count: 0 },
        ];
        let mut row = vec![-1.0, 3.0, 4.0];
        let c = candidates(&mut row, &q);
        // id 0: -1 + 10 = 9, / 2 = 4.5, - 1.0 = 3.5, - 0.25 = 3.25; id 2: 4 / 2 = 2.
        assert_eq!(row, [3.25, 3.0, 2.0]);
        assert_eq!(c.ids, [0]);
    }

    #[test]
    fn a_row_without_a_finite_max_keeps_every_id() {
        let mut row = vec![f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY];
        assert_eq!(candidates(&mut row, &query(20.0, None)).ids, [0, 1, 2]);
        let mut row = vec![0.0, f32::INFINITY];
        assert_eq!(candidates(&mut row, &query(20.0, None)).ids, [0, 1]);
    }
}
