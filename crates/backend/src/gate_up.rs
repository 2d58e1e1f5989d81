//! The packed gate/up weight a backend may hold instead of two: one `[2 * inter, hidden]` matmul
//! whose rows interleave gate and up in groups of [`GROUP`], so gate row `j` and up row `j` land
//! in the same 16-row tile (a kernel can apply the activation in its store).

/// Rows of gate, then of up, in each 16-row group of the packed weight.
pub const GROUP: usize = 8;

/// Where packed row `r` comes from: `(from_up, row)`.
pub fn source_row(r: usize) -> (bool, usize) {
    (r % (2 * GROUP) >= GROUP, r / (2 * GROUP) * GROUP + r % GROUP)
}

/// Whether a gate/up pair of `inter` rows each can be packed (whole groups).
pub fn packable(inter: usize) -> bool {
    inter > 0 && inter.is_multiple_of(GROUP)
}

/// Splits rows of a packed matmul output (`[rows, 2 * inter]`) into gate and up rows.
pub fn unpack(packed: &[f32], rows: usize, inter: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut gate, mut up) = (vec![0.0; rows * inter], vec![0.0; rows * inter]);
    for (r, row) in packed.chunks_exact(2 * inter).take(rows).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let (from_up, j) = source_row(c);
            let dst = if from_up { &mut up } else { &mut gate };
            dst[r * inter + j] = v;
        }
    }
    (gate, up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_rows_are_each_source_row_once() {
        let inter = 24;
        let mut seen = vec![[false; 2]; inter];
        for r in 0..2 * inter {
            let (from_up, j) = source_row(r);
            assert!(!seen[j][from_up as usize], "row {r} repeats ({from_up}, {j})");
            seen[j][from_up as usize] = true;
            // Gate and up of one row sit in the same 16-row tile, 8 apart.
            assert_eq!(source_row(if from_up { r - GROUP } else { r + GROUP }), (!from_up, j));
        }
        assert!(seen.iter().all(|s| s[0] && s[1]));
    }

    #[test]
    fn unpack_inverts_the_packing() {
        let (rows, inter) = (3, 16);
        let packed: Vec<f32> = (0..rows * 2 * inter)
            .map(|i| {
                let (r, c) = (i / (2 * inter), i % (2 * inter));
                let (from_up, j) = source_row(c);
                (r * 1000 + j) as f32 + if from_up { 0.5 } else { 0.0 }
            })
            .collect();
        let (gate, up) = unpack(&packed, rows, inter);
        for r in 0..rows {
            for j in 0..inter {
                assert_eq!(gate[r * inter + j], (r * 1000 + j) as f32);
                assert_eq!(up[r * inter + j], (r * 1000 + j) as f32 + 0.5);
            }
        }
        assert!(!packable(12) && packable(16) && !packable(0));
    }
}
