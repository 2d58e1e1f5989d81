//! LayerNorm with a bias over each consecutive group of `w.len()` values (DeepSeek sparse
//! attention's indexer key norm), in f32: `(x - mean) / sqrt(var + eps) * w + b`, the variance
//! the biased one, each sum left to right.

/// `x` normed in groups of `w.len()` values, then scaled by `w` and shifted by `b`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let n = w.len().max(1);
    let mut y = Vec::with_capacity(x.len());
    for g in x.chunks(n) {
        let mean = g.iter().fold(0.0f32, |acc, v| acc + v) / n as f32;
        let var = g.iter().fold(0.0f32, |acc, v| acc + (v - mean) * (v - mean)) / n as f32;
        let inv = 1.0 / (var + eps).sqrt();
        y.extend(g.iter().zip(w).zip(b).map(|((v, w), b)| (v - mean) * inv * w + b));
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_each_group_then_scales_and_shifts() {
        let y = layer_norm(&[1.0, 3.0, -2.0, 2.0], &[1.0, 2.0], &[0.5, 0.0], 0.0);
        // group 1: mean 2, var 1 -> [-1, 1]; group 2: mean 0, var 4 -> [-1, 1].
        assert_eq!(y, vec![-0.5, 2.0, -0.5, 2.0]);
    }
}
