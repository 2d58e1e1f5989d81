//! FP8 weights' block scales: the dequantized weight is each E4M3 code times the scale of the
//! block it falls in (DeepSeek-V3's `weight_scale_inv`; a per-channel or per-tensor scale is a
//! block one row or the whole matrix tall and the whole row wide).

use crate::BackendError;

/// One f32 scale per `block[0] x block[1]` block of a `[rows, cols]` weight, row-major over the
/// block grid; blocks at the bottom and right edges may be partial.
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Scales {
    /// Block height and width, in weights.
    pub block: [usize; 2],
    /// `[rows.div_ceil(block[0]), cols.div_ceil(block[1])]` scales.
    pub values: Vec<f32>,
}

impl Fp8Scales {
    /// The block grid `[row blocks, column blocks]` over a `[rows, cols]` weight.
    pub fn grid(&self, rows: usize, cols: usize) -> [usize; 2] {
        [rows.div_ceil(self.block[0].max(1)), cols.div_ceil(self.block[1].max(1))]
    }

    /// Refuses scales that do not cover `name`'s `[rows, cols]` weight one per block, or that
    /// are not finite and above zero.
    pub fn check(&self, name: &str, rows: usize, cols: usize) -> Result<(), BackendError> {
        let bad = |msg: String| Err(BackendError::Unsupported(format!("{name}: {msg}")));
        if self.block.contains(&0) {
            return bad(format!("FP8 block {:?} has a zero side", self.block));
        }
        let [gr, gc] = self.grid(rows, cols);
        if self.values.len() != gr * gc {
            return bad(format!("{} FP8 scales for a {gr}x{gc} block grid", self.values.len()));
        }
        match self.values.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
            Some(i) => bad(format!("FP8 scale {i} is {}, not finite and above zero", self.values[i])),
            None => Ok(()),
        }
    }

    /// Row `r` of the weight from its codes: each code's value times its block's scale, in f32.
    pub fn dequantize_row(&self, codes: &[u8], r: usize, out: &mut [f32]) {
        let (bw, gc) = (self.block[1], self.grid(0, codes.len())[1]);
        let scales = &self.values[r / self.block[0] * gc..][..gc];
        for ((o, c), &s) in out.chunks_mut(bw).zip(codes.chunks(bw)).zip(scales) {
            for (o, &c) in o.iter_mut().zip(c) {
                *o = tf_formats::fp8::e4m3(c) * s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_edge_blocks_take_their_own_scale() {
        // A 3x5 weight in 2x2 blocks: a 2x3 grid, the last row and column partial.
        let s = Fp8Scales { block: [2, 2], values: vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0] };
        assert!(s.check("w", 3, 5).is_ok());
        let one = 0x38; // 1.0
        let mut out = [0.0; 5];
        s.dequantize_row(&[one; 5], 1, &mut out);
        assert_eq!(out, [1.0, 1.0, 2.0, 2.0, 4.0]);
        s.dequantize_row(&[one; 5], 2, &mut out);
        assert_eq!(out, [8.0, 8.0, 16.0, 16.0, 32.0]);
    }

    #[test]
    fn bad_scales_are_refused() {
        let s = |values: Vec<f32>| Fp8Scales { block: [2, 2], values };
        assert!(s(vec![1.0; 5]).check("w", 3, 5).is_err());
        for v in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let e = s(vec![1.0, 1.0, 1.0, 1.0, 1.0, v]).check("w", 3, 5).unwrap_err().to_string();
            assert!(e.contains("w: FP8 scale 5"), "{e}");
        }
        assert!(Fp8Scales { block: [0, 2], values: vec![] }.check("w", 3, 5).is_err());
    }
}
