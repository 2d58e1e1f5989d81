//! A round's sampling candidates on the CPU: its rows are selected in parallel on the backend's
//! pool, each from its own copy of the row (tf_backend::candidates), which is what the default
//! does one row after another.

use rayon::prelude::*;
use tf_backend::{Candidates, HostTensor, RowQuery, candidates};

/// Per query, the candidates of row `rows[i]` of `x` under `queries[i]`; `x` is left as it is.
pub(crate) fn sample_candidates(x: &HostTensor, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
    rows.par_iter().zip(queries).map(|(&r, q)| candidates::candidates(&mut x.row(r).to_vec(), q)).collect()
}

#[cfg(test)]
mod tests {
    use crate::CpuBackend;
    use crate::testutil::Rng;
    use tf_backend::{Backend, HostTensor, LogitEdit, RaceKey, RowQuery, candidates};

    #[test]
    fn parallel_rows_give_each_rows_own_candidates() {
        let (rows, cols) = (6, 3000);
        let mut rng = Rng::new(5);
        let data: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * 0.5).collect();
        let base = RowQuery {
            edits: vec![LogitEdit { id: 7, bias: Some(3.0), seen: true, count: 1 }],
            repetition_penalty: 1.3,
            frequency_penalty: 0.1,
            presence_penalty: 0.2,
            temperature: Some(0.8),
            window: 40.0,
            race: Some(RaceKey { seed: 1, position: 9 }),
            top_k: 0,
            top_p: 0.95,
            min_p: 0.0,
            mask: None,
        };
        let queries: Vec<RowQuery> = (0..4)
            .map(|i| RowQuery { top_k: [0, 50, 0, 1][i], top_p: [0.95, 1.0, 0.5, 1.0][i], ..base.clone() })
            .collect();
        let picked = [5, 0, 3, 2];
        let b = CpuBackend::new(2).unwrap_or_else(|e| panic!("{e}"));
        let mut x = HostTensor { data: data.clone(), rows, cols };
        let got = b.sample_candidates(&mut x, &picked, &queries);
        assert_eq!(x.data, data, "the rows are left as they were");
        for ((&r, q), c) in picked.iter().zip(&queries).zip(&got) {
            let want = candidates::candidates(&mut data[r * cols..(r + 1) * cols].to_vec(), q);
            assert_eq!(c, &want, "row {r}");
            assert!(!c.ids.is_empty() && c.ids.len() < cols, "row {r}: {} candidates", c.ids.len());
        }
    }
}
