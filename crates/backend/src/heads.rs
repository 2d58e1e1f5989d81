//! Per-head ops of multi-head latent attention (MLA): a matmul whose weight differs per head
//! (the absorbed `kv_b_proj` halves) and the per-head concatenation of two activations. Host
//! code here; `Backend`'s defaults run it on the host.

/// A weight per head: `heads` matrices of `[out, cols]`, stacked `[heads * out, cols]`, f32
/// row-major on the host.
#[derive(Clone, Copy, Debug)]
pub struct HeadWeights<'a> {
    /// The stacked values.
    pub host: &'a [f32],
    /// Heads.
    pub heads: usize,
    /// Rows of one head's matrix (its output width).
    pub out: usize,
}

impl HeadWeights<'_> {
    /// Columns of one head's matrix (its input width).
    pub fn cols(&self) -> usize {
        self.host.len() / (self.heads * self.out).max(1)
    }
}

/// `y[r][h * out + o] = sum_i x[r][h * cols + i] * w[h][o][i]` for `x` `[rows, heads * cols]`,
/// each sum left to right over `i` (one order whatever the batch).
pub fn head_matmul(x: &[f32], rows: usize, w: &HeadWeights<'_>) -> Vec<f32> {
    let (heads, out, cols) = (w.heads, w.out, w.cols());
    assert_eq!(x.len(), rows * heads * cols, "head_matmul: x is not [rows, heads * cols]");
    let mut y = vec![0.0f32; rows * heads * out];
    for (xr, yr) in x.chunks_exact(heads * cols).zip(y.chunks_exact_mut(heads * out)) {
        for h in 0..heads {
            let xh = &xr[h * cols..(h + 1) * cols];
            for (o, yo) in yr[h * out..(h + 1) * out].iter_mut().enumerate() {
                let wr = &w.host[(h * out + o) * cols..][..cols];
                *yo = xh.iter().zip(wr).fold(0.0, |acc, (a, b)| acc + a * b);
            }
        }
    }
    y
}

/// Each row's heads of `a` (`[rows, heads * wa]`) and `b` (`[rows, heads * wb]`) side by side:
/// `[rows, heads * (wa + wb)]`, head `h` being `a`'s head `h` then `b`'s.
pub fn concat_heads(a: &[f32], b: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    let (wa, wb) = (a.len() / (rows * heads).max(1), b.len() / (rows * heads).max(1));
    let mut y = Vec::with_capacity(a.len() + b.len());
    for (ha, hb) in a.chunks_exact(wa.max(1)).zip(b.chunks_exact(wb.max(1))).take(rows * heads) {
        y.extend_from_slice(&ha[..wa]);
        y.extend_from_slice(&hb[..wb]);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_head_takes_its_own_matrix() {
        // Two heads of two inputs; head 0 doubles, head 1 swaps and adds a sum row.
        let w = [2.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0];
        let w = HeadWeights { host: &w, heads: 2, out: 3 };
        // w is [2 * 3, 2]: head 0 rows (2,0),(0,2),(0,0); head 1 rows (0,1),(1,0),(1,1).
        let y = head_matmul(&[1.0, 2.0, 3.0, 4.0], 1, &w);
        assert_eq!(y, vec![2.0, 4.0, 0.0, 4.0, 3.0, 7.0]);
    }

    #[test]
    fn heads_sit_side_by_side() {
        let y = concat_heads(&[1.0, 2.0, 3.0, 4.0], &[9.0, 8.0], 1, 2);
        assert_eq!(y, vec![1.0, 2.0, 9.0, 3.0, 4.0, 8.0]);
        let y = concat_heads(&[1.0, 2.0, 3.0, 4.0], &[9.0, 8.0], 2, 1);
        assert_eq!(y, vec![1.0, 2.0, 9.0, 3.0, 4.0, 8.0]);
    }
}
