//! An FP8 weight's scales taken from the checkpoint beside it and checked against it: the
//! shape its strategy implies, a float dtype, every value finite and above zero
//! (docs/architecture.md, the checks table).

use crate::error::ModelError;
use crate::quant_config::{Fp8Config, Fp8Strategy};
use tf_backend::Fp8Scales;
use tf_core::DType;
use tf_formats::TensorView;

/// The scale tensor's name for weight `name` (`x.weight` -> `x.weight_scale_inv`).
pub fn scale_name(q: &Fp8Config, name: &str) -> String {
    format!("{name}{}", q.scale_suffix)
}

/// `s`, the scales of the `[rows, cols]` FP8 weight `w`, checked and laid over its block grid.
pub fn scales(q: &Fp8Config, w: &TensorView, s: &TensorView) -> Result<Fp8Scales, ModelError> {
    let bad = |msg: String| ModelError::Scale { file: s.file.clone(), tensor: s.name.clone(), msg };
    let (rows, cols) = match w.shape[..] {
        [r, c] => (r, c),
        _ => return Err(bad(format!("its weight '{}' is not 2-D ({:?})", w.name, w.shape))),
    };
    if !s.dtype.is_float() {
        return Err(bad(format!("dtype {} is not a float type (f32, bf16 or f16 scales)", s.dtype)));
    }
    let (block, expected): ([usize; 2], &[&[usize]]) = match q.strategy {
        Fp8Strategy::Block([br, bc]) => ([br, bc], &[&[rows.div_ceil(br), cols.div_ceil(bc)]]),
        Fp8Strategy::Channel => ([1, cols.max(1)], &[&[rows, 1]]),
        Fp8Strategy::Tensor => ([rows.max(1), cols.max(1)], &[&[], &[1]]),
    };
    if !expected.contains(&s.shape.as_slice()) {
        let how = match q.strategy {
            Fp8Strategy::Block(b) => format!("weight_block_size {b:?} over"),
            Fp8Strategy::Channel => "one scale per row of".into(),
            Fp8Strategy::Tensor => "one scale for".into(),
        };
        return Err(bad(format!(
            "shape {:?} does not tile the [{rows}, {cols}] weight '{}': {how} it needs {:?}",
            s.shape, w.name, expected[0]
        )));
    }
    let values = s.to_f32();
    if let Some(i) = values.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
        let gc = values.len() / expected[0].first().copied().unwrap_or(1).max(1);
        let at = [i / gc.max(1), i % gc.max(1)];
        return Err(bad(format!("scale {at:?} is {}; scales must be finite and above zero", values[i])));
    }
    Ok(Fp8Scales { block, values })
}

/// The FP8 config FP8 weight `w` needs, refused where the checkpoint declares none.
pub fn needs_config<'a>(q: Option<&'a Fp8Config>, w: &TensorView) -> Result<&'a Fp8Config, ModelError> {
    q.ok_or_else(|| ModelError::Dtype {
        file: w.file.clone(),
        tensor: w.name.clone(),
        msg: format!("dtype {} needs a quantization_config (quant_method fp8 or compressed-tensors)", DType::F8E4M3),
    })
}

/// The scales of rows `rows` (in that order) of a weight `cols` wide scaled by `s`: one block
/// row per weight row (`[1, block width]` blocks), each the scales of the block row its weight
/// row came from, so every code keeps its scale.
pub fn select_rows(s: &Fp8Scales, cols: usize, rows: &[usize]) -> Fp8Scales {
    let gc = cols.div_ceil(s.block[1].max(1));
    let values = rows.iter().flat_map(|&r| s.values[r / s.block[0].max(1) * gc..][..gc].iter().copied()).collect();
    Fp8Scales { block: [1, s.block[1]], values }
}

/// Scales of columns `start..start + width` of an FP8 weight of `[rows, cols]` with scales `s`:
/// whole column blocks where `start` and `width` fall on block edges (or the slice ends the
/// weight), else one scale column per weight column.
pub fn select_cols(s: &Fp8Scales, rows: usize, cols: usize, start: usize, width: usize) -> Fp8Scales {
    let [gr, gc] = s.grid(rows, cols);
    let bw = s.block[1].max(1);
    let aligned = start.is_multiple_of(bw) && (width.is_multiple_of(bw) || start + width == cols);
    let (block_w, scale_of): (usize, Box<dyn Fn(usize) -> usize>) = match aligned {
        true => (bw, Box::new(move |j| start / bw + j)),
        false => (1, Box::new(move |j| (start + j) / bw)),
    };
    let n = width.div_ceil(block_w);
    let values = (0..gr).flat_map(|r| (0..n).map(|j| s.values[r * gc + scale_of(j)]).collect::<Vec<_>>()).collect();
    Fp8Scales { block: [s.block[0], block_w], values }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_columns_keep_each_code_with_its_scale() {
        // A 5x7 weight in [2, 3] blocks: a 3x3 grid, the last row and column partial.
        let s = Fp8Scales { block: [2, 3], values: (0..9).map(|i| (1 << i) as f32).collect() };
        let codes: Vec<u8> = (0..35).map(|i| 0x30 + i as u8).collect();
        for (start, width) in [(0, 3), (3, 4), (1, 4), (2, 2), (6, 1), (0, 7)] {
            let picked = select_cols(&s, 5, 7, start, width);
            assert!(picked.check("w", 5, width).is_ok(), "{start}+{width}");
            for r in 0..5 {
                let mut want = [0.0; 7];
                s.dequantize_row(&codes[r * 7..][..7], r, &mut want);
                let mut got = vec![0.0; width];
                picked.dequantize_row(&codes[r * 7 + start..][..width], r, &mut got);
                assert_eq!(got, want[start..start + width], "row {r} of {start}+{width}");
            }
        }
    }

    #[test]
    fn selected_rows_keep_each_code_with_its_scale() {
        // A 5x5 weight in [2, 3] blocks: a 3x2 grid, the last row and column partial.
        let s = Fp8Scales { block: [2, 3], values: vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0] };
        let codes: Vec<u8> = (0..25).map(|i| 0x30 + i as u8).collect();
        let rows = [4, 1, 2, 0];
        let picked = select_rows(&s, 5, &rows);
        assert_eq!(picked.block, [1, 3]);
        assert!(picked.check("w", rows.len(), 5).is_ok());
        for (i, &r) in rows.iter().enumerate() {
            let (mut want, mut got) = ([0.0; 5], [0.0; 5]);
            s.dequantize_row(&codes[r * 5..][..5], r, &mut want);
            picked.dequantize_row(&codes[r * 5..][..5], i, &mut got);
            assert_eq!(got, want, "row {r}");
        }
    }
}
