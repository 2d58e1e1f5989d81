//! Rotary position embedding: inverse frequencies per scaling kind (as Hugging Face computes
//! them, in f32) and the rotate-half application shared by the CPU backends.

/// How the base frequencies are scaled for long context.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    Default,
    /// Positions divided by `factor`.
    Linear {
        /// Divisor.
        factor: f32,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        /// Scale of low frequencies.
        factor: f32,
        /// Low-frequency bound.
        low_freq_factor: f32,
        /// High-frequency bound.
        high_freq_factor: f32,
        /// Context length the model was trained at.
        original_max_position_embeddings: f32,
    },
    /// YaRN (NTK-by-parts with an attention temperature).
    Yarn {
        /// Context extension factor.
        factor: f32,
        /// Context length before extension.
        original_max_position_embeddings: f32,
        /// Ramp bound (rotations).
        beta_fast: f32,
        /// Ramp bound (rotations).
        beta_slow: f32,
        /// Explicit attention factor, else derived from `factor`.
        attention_factor: Option<f32>,
        /// Round the correction range to integers.
        truncate: bool,
    },
    /// LongRoPE (Phi-3.5, Phi-4-mini): each frequency divided by its own factor (the short or
    /// the long set of the config, one chosen per model), cos and sin scaled.
    LongRope {
        /// One divisor per rotated pair.
        factors: Vec<f32>,
        /// Factor applied to cos and sin.
        attention_factor: f32,
    },
}

/// Inverse frequencies and the cos/sin scale for one kind of layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// One inverse frequency per rotated pair; the rotary width is twice its length.
    pub inv_freq: Vec<f32>,
    /// Factor applied to cos and sin (YaRN's attention scaling; 1 otherwise).
    pub attention_scaling: f32,
}

impl Rope {
    /// Frequencies for rotary width `dim` (head_dim times the partial rotary factor) and `theta`.
    pub fn new(dim: usize, theta: f32, scaling: &RopeScaling) -> Rope {
        let base: Vec<f32> = (0..dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f32 / dim as f32)).collect();
        let mut attention_scaling = 1.0;
        let inv_freq = match *scaling {
            RopeScaling::Default => base,
            // As transformers: 1 / (factor * theta^(2i / dim)), in f32.
            RopeScaling::LongRope { ref factors, attention_factor } => {
                attention_scaling = attention_factor;
                (0..dim / 2)
                    .map(|i| 1.0 / (factors.get(i).copied().unwrap_or(1.0) * theta.powf((2 * i) as f32 / dim as f32)))
                    .collect()
            }
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let low_wavelen = original_max_position_embeddings / low_freq_factor;
                let high_wavelen = original_max_position_embeddings / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_wavelen { f / factor } else { f };
                        if wavelen < high_wavelen || wavelen > low_wavelen {
                            scaled
                        } else {
                            let smooth = (original_max_position_embeddings / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate,
            } => {
                attention_scaling =
                    attention_factor.unwrap_or(if factor <= 1.0 { 1.0 } else { 0.1 * factor.ln() + 1.0 });
                let correction = |rot: f32| {
                    (dim as f32 * (original_max_position_embeddings / (rot * 2.0 * std::f32::consts::PI)).ln())
                        / (2.0 * theta.ln())
                };
                let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
                if truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(dim as f32 - 1.0));
                if low == high {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        (f / factor) * (1.0 - extrapolation) + f * extrapolation
                    })
                    .collect()
            }
        };
        Rope { inv_freq, attention_scaling }
    }

    /// Rotates one head `x` (`head_dim` wide; the first `2 * inv_freq.len()` values) at `pos`.
    #[inline]
    pub fn apply(&self, x: &mut [f32], pos: u32, cos_sin: &mut Vec<(f32, f32)>) {
        let half = self.inv_freq.len();
        cos_sin.clear();
        cos_sin.extend(self.inv_freq.iter().map(|&f| {
            let angle = pos as f32 * f;
            (angle.cos() * self.attention_scaling, angle.sin() * self.attention_scaling)
        }));
        Rope::rotate(x, half, cos_sin);
    }

    /// Rotates one head given precomputed `(cos, sin)` pairs (rotate-half layout).
    #[inline]
    pub fn rotate(x: &mut [f32], half: usize, cos_sin: &[(f32, f32)]) {
        for (i, &(c, s)) in cos_sin.iter().enumerate().take(half) {
            let (x1, x2) = (x[i], x[i + half]);
            x[i] = x1 * c - x2 * s;
            x[i + half] = x2 * c + x1 * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_frequencies_follow_theta() {
        let r = Rope::new(8, 10000.0, &RopeScaling::Default);
        assert_eq!(r.inv_freq.len(), 4);
        assert_eq!(r.inv_freq[0], 1.0);
        assert!((r.inv_freq[1] - 0.1).abs() < 1e-6);
    }

    #[test]
    fn linear_divides_every_frequency() {
        let a = Rope::new(8, 10000.0, &RopeScaling::Default);
        let b = Rope::new(8, 10000.0, &RopeScaling::Linear { factor: 4.0 });
        for (x, y) in a.inv_freq.iter().zip(&b.inv_freq) {
            assert_eq!(x / 4.0, *y);
        }
    }

    #[test]
    fn llama3_keeps_high_and_scales_low_frequencies() {
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let a = Rope::new(128, 500000.0, &RopeScaling::Default);
        let b = Rope::new(128, 500000.0, &s);
        assert_eq!(a.inv_freq[0], b.inv_freq[0]);
        assert_eq!(a.inv_freq[63] / 8.0, b.inv_freq[63]);
    }

    #[test]
    fn rotation_at_zero_is_identity_and_preserves_norm() {
        let r = Rope::new(4, 10000.0, &RopeScaling::Default);
        let mut buf = Vec::new();
        let mut x = [1.0, 2.0, 3.0, 4.0];
        r.apply(&mut x, 0, &mut buf);
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
        r.apply(&mut x, 7, &mut buf);
        let n: f32 = x.iter().map(|v| v * v).sum();
        assert!((n - 30.0).abs() < 1e-4);
    }
}
