//! Multi-head latent attention's per-head matmul on the CPU: tf_backend::heads::head_matmul's
//! arithmetic (each output a left-to-right sum of rounded products, `acc + x * w`), so its bits,
//! with each (row, head) on the pool and eight outputs summed side by side (independent sums,
//! each in its own order) so the adds' latency overlaps.

use rayon::ThreadPool;
use rayon::prelude::*;
use tf_backend::{HeadWeights, HostTensor};

/// Outputs summed side by side.
const LANES: usize = 8;

/// `x` `[rows, heads * cols]` times each head's matrix of `w`: `[rows, heads * out]`.
pub fn head_matmul(pool: &ThreadPool, x: &HostTensor, w: &HeadWeights<'_>) -> HostTensor {
    let (heads, out, cols) = (w.heads, w.out, w.cols());
    assert_eq!(x.cols, heads * cols, "head_matmul: x is not [rows, heads * cols]");
    let mut y = vec![0.0f32; x.rows * heads * out];
    if out > 0 {
        pool.install(|| {
            y.par_chunks_mut(out).enumerate().for_each(|(i, yh)| {
                let (r, h) = (i / heads, i % heads);
                let xh = &x.data[(r * heads + h) * cols..][..cols];
                let rows_of = |o: usize| &w.host[(h * out + o) * cols..][..cols];
                for (block, ys) in yh.chunks_mut(LANES).enumerate() {
                    let first = block * LANES;
                    if ys.len() == LANES {
                        let ws: [&[f32]; LANES] = std::array::from_fn(|k| rows_of(first + k));
                        ys.copy_from_slice(&dots(xh, ws));
                    } else {
                        for (k, v) in ys.iter_mut().enumerate() {
                            *v = xh.iter().zip(rows_of(first + k)).fold(0.0, |acc, (a, b)| acc + a * b);
                        }
                    }
                }
            })
        });
    }
    HostTensor { data: y, rows: x.rows, cols: heads * out }
}

/// `x . ws[k]` for each `k`, every sum left to right.
fn dots(x: &[f32], ws: [&[f32]; LANES]) -> [f32; LANES] {
    let mut acc = [0.0f32; LANES];
    for (i, &a) in x.iter().enumerate() {
        for k in 0..LANES {
            acc[k] += a * ws[k][i];
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_bits_for_any_shape() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        let val = |i: usize, s: f32| ((i * 7919 + 13) % 1009) as f32 / 1009.0 * s - s / 2.0;
        for (rows, heads, out, cols) in [(3, 4, 19, 33), (1, 2, 8, 5), (5, 3, 1, 64), (0, 2, 4, 4)] {
            let host: Vec<f32> = (0..heads * out * cols).map(|i| val(i, 0.3)).collect();
            let w = HeadWeights { host: &host, heads, out };
            let x = HostTensor {
                data: (0..rows * heads * cols).map(|i| val(i + 5, 2.0)).collect(),
                rows,
                cols: heads * cols,
            };
            let want = tf_backend::heads::head_matmul(&x.data, rows, &w);
            let got = head_matmul(&pool, &x, &w);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.data), bits(&want), "{rows}x{heads}x{out}x{cols}");
            assert_eq!((got.rows, got.cols), (rows, heads * out));
        }
    }
}
