//! Multi-head latent attention's per-head matmul on the CPU: tf_backend::heads::head_matmul's
//! arithmetic (each output a left-to-right sum of rounded products, `acc + x * w`), so its bits.
//! Over the backend's own copy of the weights ([`transposed`], `Backend::head_copy`) each task
//! takes one head and up to four rows, and sixteen outputs of a row are summed side by side as
//! one vector (independent sums, each in its own order) from one load of the weights that four
//! rows share; without it, each (row, head) is a task and eight outputs are summed side by side.

use rayon::ThreadPool;
use rayon::prelude::*;
use tf_backend::{HeadWeights, HostTensor};

/// Outputs summed side by side over the weights as stored.
const LANES: usize = 8;
/// Outputs summed side by side over the transposed copy (one AVX-512 vector, two AVX2 ones).
const WIDE: usize = 16;
/// Rows a task of the transposed path takes (each weight load serves them all).
const ROWS: usize = 4;

/// `w` per head transposed: `[heads, cols, out]`, head `h`'s input `i` giving its outputs side
/// by side.
pub fn transposed(w: &HeadWeights<'_>) -> Vec<f32> {
    let (heads, out, cols) = (w.heads, w.out, w.cols());
    let mut t = vec![0.0f32; heads * cols * out];
    for h in 0..heads {
        for o in 0..out {
            for (i, &v) in w.host[(h * out + o) * cols..][..cols].iter().enumerate() {
                t[(h * cols + i) * out + o] = v;
            }
        }
    }
    t
}

/// `x` `[rows, heads * cols]` times each head's matrix of `w`: `[rows, heads * out]`; over `wt`
/// (`w` [`transposed`]) where given.
pub fn head_matmul(pool: &ThreadPool, x: &HostTensor, w: &HeadWeights<'_>, wt: Option<&[f32]>) -> HostTensor {
    let (heads, out, cols) = (w.heads, w.out, w.cols());
    assert_eq!(x.cols, heads * cols, "head_matmul: x is not [rows, heads * cols]");
    let y = match wt {
        Some(t) if t.len() == w.host.len() => over_transposed(pool, x, t, heads, out, cols),
        _ => over_rows(pool, x, w),
    };
    HostTensor { data: y, rows: x.rows, cols: heads * out }
}

/// [`head_matmul`] over `w` as stored.
fn over_rows(pool: &ThreadPool, x: &HostTensor, w: &HeadWeights<'_>) -> Vec<f32> {
    let (heads, out, cols) = (w.heads, w.out, w.cols());
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
    y
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

/// [`head_matmul`] over the transposed copy `t`: a task per (head, four rows).
fn over_transposed(pool: &ThreadPool, x: &HostTensor, t: &[f32], heads: usize, out: usize, cols: usize) -> Vec<f32> {
    let rows = x.rows;
    let tasks: Vec<(usize, usize)> = (0..heads).flat_map(|h| (0..rows).step_by(ROWS).map(move |r| (h, r))).collect();
    let parts: Vec<Vec<f32>> = pool.install(|| {
        tasks
            .par_iter()
            .map(|&(h, r0)| {
                let n = ROWS.min(rows - r0);
                let xs: Vec<&[f32]> = (r0..r0 + n).map(|r| &x.data[(r * heads + h) * cols..][..cols]).collect();
                head_rows(&xs, &t[h * cols * out..][..cols * out], out)
            })
            .collect()
    });
    let mut y = vec![0.0f32; rows * heads * out];
    for (&(h, r0), part) in tasks.iter().zip(&parts) {
        for (k, row) in part.chunks_exact(out.max(1)).enumerate() {
            y[((r0 + k) * heads + h) * out..][..out].copy_from_slice(row);
        }
    }
    y
}

/// Rows `xs` (each `[cols]`) times one head's transposed matrix `th` (`[cols, out]`):
/// `[xs.len(), out]`.
fn head_rows(xs: &[&[f32]], th: &[f32], out: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; xs.len() * out];
    let mut o0 = 0;
    while o0 < out {
        let wn = WIDE.min(out - o0);
        if wn == WIDE && xs.len() == ROWS {
            let mut acc = [[0.0f32; WIDE]; ROWS];
            for (i, wr) in th.chunks_exact(out).enumerate() {
                let wv: &[f32; WIDE] = wr[o0..o0 + WIDE].try_into().unwrap_or_else(|_| unreachable!("WIDE values"));
                for (acc_r, xr) in acc.iter_mut().zip(xs) {
                    let a = xr[i];
                    for (s, &wk) in acc_r.iter_mut().zip(wv) {
                        *s += a * wk;
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate() {
                y[r * out + o0..][..WIDE].copy_from_slice(acc_r);
            }
        } else {
            for (r, xr) in xs.iter().enumerate() {
                let mut acc = [0.0f32; WIDE];
                for (i, wr) in th.chunks_exact(out).enumerate() {
                    let a = xr[i];
                    for (s, &wk) in acc[..wn].iter_mut().zip(&wr[o0..o0 + wn]) {
                        *s += a * wk;
                    }
                }
                y[r * out + o0..][..wn].copy_from_slice(&acc[..wn]);
            }
        }
        o0 += wn;
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_bits_for_any_shape() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        let val = |i: usize, s: f32| ((i * 7919 + 13) % 1009) as f32 / 1009.0 * s - s / 2.0;
        let shapes = [(3, 4, 19, 33), (1, 2, 8, 5), (5, 3, 1, 64), (0, 2, 4, 4), (9, 2, 48, 40), (4, 1, 16, 3)];
        for (rows, heads, out, cols) in shapes {
            let host: Vec<f32> = (0..heads * out * cols).map(|i| val(i, 0.3)).collect();
            let w = HeadWeights { host: &host, heads, out };
            let x = HostTensor {
                data: (0..rows * heads * cols).map(|i| val(i + 5, 2.0)).collect(),
                rows,
                cols: heads * cols,
            };
            let want = tf_backend::heads::head_matmul(&x.data, rows, &w);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let t = transposed(&w);
            for (name, copy) in [("as stored", None), ("transposed", Some(t.as_slice()))] {
                let got = head_matmul(&pool, &x, &w, copy);
                assert_eq!(bits(&got.data), bits(&want), "{name}: {rows}x{heads}x{out}x{cols}");
                assert_eq!((got.rows, got.cols), (rows, heads * out));
            }
        }
    }

    #[test]
    fn the_transposed_copy_puts_a_heads_outputs_side_by_side() {
        // Head 1 of two, out 2, cols 3: w[1][o][i] = 10 o + i lands at t[(3 + i) * 2 + o].
        let host: Vec<f32> =
            (0..2 * 2 * 3).map(|j| if j >= 6 { (10 * ((j - 6) / 3) + (j - 6) % 3) as f32 } else { -1.0 }).collect();
        let t = transposed(&HeadWeights { host: &host, heads: 2, out: 2 });
        assert_eq!(&t[6..], &[0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
    }
}
