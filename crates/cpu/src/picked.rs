//! A head's logits over a few of its tokens (`Backend::matmul_picked`: the Gemma 4 assistant's
//! ordered head keeps its best centroids' tokens): each picked row of the weight read and
//! dequantized alone and dotted with the input row, in place of the whole product.

use rayon::ThreadPool;
use rayon::prelude::*;
use tf_backend::{HostMat, HostTensor};

/// Picks a task takes.
const CHUNK: usize = 64;
/// Products summed side by side in a dot.
const LANES: usize = 16;

/// Per row `r` of `x`, `x[r] . w[id]` for each `id` of `picks[r]` (every id below `w.rows`).
pub fn matmul_picked(pool: &ThreadPool, x: &HostTensor, w: &HostMat, picks: &[Vec<u32>]) -> Vec<Vec<f32>> {
    assert_eq!((x.cols, picks.len()), (w.cols, x.rows), "matmul_picked: shapes");
    pool.install(|| {
        picks
            .iter()
            .enumerate()
            .map(|(r, ids)| {
                let xr = x.row(r);
                ids.par_chunks(CHUNK)
                    .flat_map_iter(|part| {
                        let mut row = vec![0.0f32; w.cols];
                        part.iter()
                            .map(|&id| {
                                w.row_f32(id as usize, &mut row);
                                dot(xr, &row)
                            })
                            .collect::<Vec<f32>>()
                    })
                    .collect()
            })
            .collect()
    })
}

/// `a . b`, [`LANES`] partial sums added at the end.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (xa, xb) in ac.zip(bc) {
        for k in 0..LANES {
            acc[k] += xa[k] * xb[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::mat;
    use tf_core::DType;

    #[test]
    fn each_rows_picks_are_its_products_with_those_weight_rows() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        let (rows, cols) = (300, 37);
        let vals: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 512.0).collect();
        let w = mat(DType::F32, rows, cols, &vals);
        let x = HostTensor { data: (0..2 * cols).map(|i| (i % 11) as f32 - 5.0).collect(), rows: 2, cols };
        let picks = vec![(0..200).map(|i| (i * 3 % rows) as u32).collect::<Vec<u32>>(), vec![299, 0, 5]];
        let got = matmul_picked(&pool, &x, &w, &picks);
        for (r, ids) in picks.iter().enumerate() {
            assert_eq!(got[r].len(), ids.len());
            for (&id, &v) in ids.iter().zip(&got[r]) {
                let want: f64 = x
                    .row(r)
                    .iter()
                    .zip(&vals[id as usize * cols..][..cols])
                    .map(|(a, b)| (*a as f64) * (*b as f64))
                    .sum();
                assert!((v as f64 - want).abs() <= 1e-4 * want.abs().max(1.0), "row {r} id {id}: {v} against {want}");
            }
        }
    }
}
