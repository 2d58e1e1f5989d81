//! The CUDA backend's logprobs against tf_backend's host rule (logprobs.rs) on the same raw
//! rows: top columns and raw values bit for bit, the log-sum-exp within f64 rounding (the device
//! sums a slice in another order); and a row's answer alone equals it among other rows.

mod common;

use common::*;
use tf_backend::logprobs::row_logprobs;
use tf_backend::{Backend, LogprobQuery, RowLogprobs};

/// Most top columns the device answers itself (src/logprob.rs `TOP_MAX`); more go to the host.
const TOP_MAX: usize = 32;

/// Test rows of width `cols`: spread, ties across slices, NaN and -inf holes, +inf, all -inf,
/// all equal, all NaN, signed zeros at the top.
fn rows(cols: usize) -> Vec<Vec<f32>> {
    let spread = |seed| rand(cols, seed, 12.0);
    let mut ties = spread(2);
    for i in [3, cols / 3, cols / 2, cols - 1, cols / 3 + 2048] {
        if i < cols {
            ties[i] = 25.0;
        }
    }
    let mut holes = spread(3);
    for i in (0..cols).step_by(97) {
        holes[i] = f32::NAN;
    }
    for i in (5..cols).step_by(89) {
        holes[i] = f32::NEG_INFINITY;
    }
    let mut inf = spread(4);
    inf[cols / 2] = f32::INFINITY;
    let mut zeros = vec![-1.0; cols];
    for i in (0..cols).step_by(3) {
        zeros[i] = if i % 2 == 0 { -0.0 } else { 0.0 };
    }
    vec![
        spread(1),
        ties,
        holes,
        vec![f32::NEG_INFINITY; cols],
        inf,
        vec![1.0; cols],
        vec![f32::NAN; cols],
        zeros,
        rand(cols, 9, 80.0),
    ]
}

/// Top columns with their values as bits (NaN equal to itself).
fn bits(top: &[(u32, f32)]) -> Vec<(u32, u32)> {
    top.iter().map(|&(i, v)| (i, v.to_bits())).collect()
}

/// Whether the device's answer is the host's: top and values bit for bit (any NaN equal), the
/// log-sum-exp equal when not finite, else within 1e-12 relative.
fn agrees(got: &RowLogprobs, want: &RowLogprobs) -> Result<(), String> {
    if bits(&got.top) != bits(&want.top) {
        return Err(format!("top {:?} against {:?}", got.top, want.top));
    }
    if !same_bits(&got.values, &want.values) {
        return Err(format!("values {:?} against {:?}", got.values, want.values));
    }
    let close = if want.lse.is_finite() {
        (got.lse - want.lse).abs() <= 1e-12 * want.lse.abs().max(1.0)
    } else {
        got.lse.to_bits() == want.lse.to_bits()
    };
    if !close {
        return Err(format!("lse {} against {}", got.lse, want.lse));
    }
    Ok(())
}

#[test]
fn logprobs_equal_the_host_rule_and_do_not_depend_on_the_batch() {
    let Some(b) = backend() else { return };
    for cols in [151936usize, 2049, 2048, 1000, 5] {
        let raw = rows(cols);
        let flat: Vec<f32> = raw.iter().flatten().copied().collect();
        let x = b.upload(&flat, raw.len(), cols);
        let asked = |r: usize| vec![0, (r * 7919 % cols) as u32, (cols - 1) as u32, (cols + 3) as u32];
        let tops = [0usize, 1, 5, 20, TOP_MAX, TOP_MAX + 1];
        let queries: Vec<LogprobQuery> = (0..raw.len())
            .map(|r| LogprobQuery { row: r, top_n: tops[r % tops.len()], ids: asked(r) })
            .chain([LogprobQuery { row: 1, top_n: 3, ids: Vec::new() }])
            .collect();
        let got = b.logprobs(&x, &queries);
        assert_eq!(got.len(), queries.len());
        for (q, g) in queries.iter().zip(&got) {
            let want = row_logprobs(&raw[q.row], q);
            if let Err(e) = agrees(g, &want) {
                panic!("{cols} columns, row {}, top {}: {e}", q.row, q.top_n);
            }
        }
        // Each query alone gives the same bits as in the batch.
        for (q, g) in queries.iter().zip(&got) {
            let alone = b.logprobs(&x, std::slice::from_ref(q));
            assert_eq!(alone[0].lse.to_bits(), g.lse.to_bits(), "{cols} columns, row {}: lse alone", q.row);
            assert_eq!(bits(&alone[0].top), bits(&g.top), "{cols} columns, row {}: top alone", q.row);
        }
        // The same row at another index of another batch.
        let shifted = b.upload(&flat[cols..], raw.len() - 1, cols);
        let again = b.logprobs(&shifted, &[LogprobQuery { row: 0, top_n: 20, ids: Vec::new() }]);
        let ref20 = b.logprobs(&x, &[LogprobQuery { row: 1, top_n: 20, ids: Vec::new() }]);
        assert_eq!(again[0].lse.to_bits(), ref20[0].lse.to_bits(), "{cols} columns: lse of a moved row");
    }
    let x = b.upload(&[1.0, 2.0], 1, 2);
    assert!(b.logprobs(&x, &[]).is_empty());
}
