//! Log-probabilities on the device (tf_backend logprobs.rs, kernels/logprob.cu): per asked row
//! its log-sum-exp, top columns and asked raw values cross over, not the row.

use crate::ctx::Ctx;
use crate::device::{Arg, ptr};
use crate::ops::select_rows;
use tf_backend::logprobs::{LSE_SLICE, row_logprobs};
use tf_backend::{LogprobQuery, RowLogprobs};

/// Most top columns a row may ask for on the device (kernels/logprob.cu `LP_TOP_MAX`); a row
/// asking for more is downloaded and answered on the host.
pub(crate) const TOP_MAX: usize = 32;
/// Words of one packed query (kernels/logprob.cu `LQ_WORDS`).
const QUERY_WORDS: usize = 4;
/// Queries one launch covers in its grid's y (the kernels loop past it).
const MAX_GRID_Y: usize = 65535;

/// The answer to each query over the rows of `x` (the same row may be asked twice).
pub(crate) fn logprobs(b: &Ctx, x: &crate::tensor::CudaAct, queries: &[LogprobQuery]) -> Vec<RowLogprobs> {
    assert!(queries.iter().all(|q| q.row < x.rows), "logprobs: a row past the {} rows", x.rows);
    let cols = x.cols;
    let (device, host): (Vec<usize>, Vec<usize>) = (0..queries.len()).partition(|&i| queries[i].top_n <= TOP_MAX);
    let mut out = vec![RowLogprobs::default(); queries.len()];
    if !device.is_empty() && cols > 0 {
        let qs: Vec<&LogprobQuery> = device.iter().map(|&i| &queries[i]).collect();
        for (&i, r) in device.iter().zip(on_device(b, x, &qs)) {
            out[i] = r;
        }
    } else {
        for &i in &device {
            out[i] = row_logprobs(&[], &queries[i]);
        }
    }
    if !host.is_empty() {
        let rows: Vec<usize> = host.iter().map(|&i| queries[i].row).collect();
        let picked = select_rows(b, x, &rows);
        let data = b.dev.download(picked.data(&b.dev), picked.len());
        for (k, &i) in host.iter().enumerate() {
            out[i] = row_logprobs(&data[k * cols..(k + 1) * cols], &queries[i]);
        }
    }
    out
}

/// The queries (each asking at most [`TOP_MAX`] columns) answered by the two kernels.
fn on_device(b: &Ctx, x: &crate::tensor::CudaAct, queries: &[&LogprobQuery]) -> Vec<RowLogprobs> {
    let (n, cols) = (queries.len(), x.cols);
    let k = queries.iter().map(|q| q.top_n.min(cols)).max().unwrap_or(0);
    let parts = cols.div_ceil(LSE_SLICE);
    assert!(cols <= i32::MAX as usize && n * parts * k.max(1) <= i32::MAX as usize, "logprobs: {n} rows of {cols}");
    let (packed, asked) = pack(queries);
    let d = &b.dev;
    let buf = d.upload(&packed);
    let qs = ptr(&buf, &d.stream);
    let ids = qs + (4 * n * QUERY_WORDS) as u64;
    let (pm, ps) = (d.alloc::<f32>(n * parts), d.alloc::<f64>(n * parts));
    let ptop = d.alloc::<u64>((n * parts * k).max(1));
    let xp = ptr(x.data(&b.dev), &d.stream);
    let (pmp, psp, ptp) = (ptr(&pm, &d.stream), ptr(&ps, &d.stream), ptr(&ptop, &d.stream));
    let (ni, ci, ki) = (Arg::I(n as i32), Arg::I(cols as i32), Arg::I(k as i32));
    let grid = (parts as u32, n.min(MAX_GRID_Y) as u32, 1);
    let args = [Arg::P(xp), Arg::P(qs), Arg::P(pmp), Arg::P(psp), Arg::P(ptp), ni, ci, ki];
    d.launch(&d.k.logprob_partial, grid, 256, 0, &args);
    let words = n * (2 + 2 * k) + asked;
    let out = d.alloc::<u32>(words.max(1));
    let args = [
        Arg::P(xp),
        Arg::P(qs),
        Arg::P(ids),
        Arg::P(pmp),
        Arg::P(psp),
        Arg::P(ptp),
        Arg::P(ptr(&out, &d.stream)),
        ni,
        ci,
        Arg::I(parts as i32),
        ki,
    ];
    d.launch(&d.k.logprob_combine, (n.min(MAX_GRID_Y) as u32, 1, 1), 256, 0, &args);
    unpack(&d.download(&out, words), queries, k)
}

/// The queries as the kernels read them (`[queries | asked ids]`) and the number of asked ids.
fn pack(queries: &[&LogprobQuery]) -> (Vec<u32>, usize) {
    let asked: usize = queries.iter().map(|q| q.ids.len()).sum();
    let mut words = Vec::with_capacity(queries.len() * QUERY_WORDS + asked);
    let mut first = 0u32;
    for q in queries {
        words.extend([q.row as u32, q.top_n as u32, first, q.ids.len() as u32]);
        first += q.ids.len() as u32;
    }
    for q in queries {
        words.extend_from_slice(&q.ids);
    }
    (words, asked)
}

/// Each query's answer from the combine kernel's words (`k` top columns a query computed).
fn unpack(words: &[u32], queries: &[&LogprobQuery], k: usize) -> Vec<RowLogprobs> {
    let (stride, mut asked) = (2 + 2 * k, queries.len() * (2 + 2 * k));
    queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let w = &words[i * stride..(i + 1) * stride];
            let lse = f64::from_bits(u64::from(w[0]) | u64::from(w[1]) << 32);
            let top = w[2..]
                .chunks_exact(2)
                .take(q.top_n)
                .take_while(|t| t[0] != u32::MAX)
                .map(|t| (t[0], f32::from_bits(t[1])))
                .collect();
            let values = words[asked..asked + q.ids.len()].iter().map(|&v| f32::from_bits(v)).collect();
            asked += q.ids.len();
            RowLogprobs { lse, top, values }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_pack_and_answers_unpack_as_the_kernels_lay_them() {
        let q = |row, top_n, ids: &[u32]| LogprobQuery { row, top_n, ids: ids.to_vec() };
        let qs = [q(3, 2, &[9, 4]), q(0, 0, &[]), q(1, 1, &[7])];
        let refs: Vec<&LogprobQuery> = qs.iter().collect();
        let (words, asked) = pack(&refs);
        assert_eq!(asked, 3);
        assert_eq!(words, [3, 2, 0, 2, 0, 0, 2, 0, 1, 1, 2, 1, 9, 4, 7]);
        let f = |x: f32| x.to_bits();
        let l = |x: f64| [x.to_bits() as u32, (x.to_bits() >> 32) as u32];
        let mut out = Vec::new();
        out.extend(l(1.5));
        out.extend([5, f(2.0), 6, f(1.0)]);
        out.extend(l(-2.0));
        out.extend([u32::MAX, 0, u32::MAX, 0]);
        out.extend(l(f64::NEG_INFINITY));
        out.extend([8, f(-1.0), u32::MAX, 0]);
        out.extend([f(0.5), f(f32::NEG_INFINITY), f(3.0)]);
        let got = unpack(&out, &refs, 2);
        let r =
            |lse, top: &[(u32, f32)], values: &[f32]| RowLogprobs { lse, top: top.to_vec(), values: values.to_vec() };
        assert_eq!(got[0], r(1.5, &[(5, 2.0), (6, 1.0)], &[0.5, f32::NEG_INFINITY]));
        assert_eq!(got[1], r(-2.0, &[], &[]));
        assert_eq!(got[2], r(f64::NEG_INFINITY, &[(8, -1.0)], &[3.0]));
    }
}
