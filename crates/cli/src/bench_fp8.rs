//! FP8 weights in `tensorfold bench`'s decode floor: a round reads an FP8 weight's codes (one
//! byte a weight, not bf16's two) and its f32 block scales, counted from the checkpoint's
//! tensor list.

use std::collections::HashMap;
use std::path::Path;
use tf_core::DType;
use tf_formats::Checkpoint;
use tf_formats::safetensors_header::TensorInfo;

/// Bytes an FP8 checkpoint's weights hold fewer than the same weights in bf16: a byte a weight,
/// less 4 bytes a scale (the backends hold scales as f32).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Fp8Bytes {
    /// Over the weights every token reads (all but routed experts').
    pub dense: f64,
    /// Over the routed experts' weights, all experts.
    pub experts: f64,
}

/// Scale suffixes of FP8 weights (`quant_method` fp8, compressed-tensors).
const SCALE_SUFFIXES: [&str; 2] = ["_scale_inv", "_scale"];

impl Fp8Bytes {
    /// From the checkpoint directory `dir`; zero where it has no FP8 weight or is no safetensors
    /// checkpoint (a GGUF file).
    pub fn of(dir: &Path) -> Fp8Bytes {
        let Ok(ckpt) = Checkpoint::open(dir) else { return Fp8Bytes::default() };
        let all: HashMap<&str, &TensorInfo> =
            ckpt.files().iter().flat_map(|f| f.tensors().iter().map(|(n, t)| (n.as_str(), t))).collect();
        let elems = |t: &TensorInfo| t.shape.iter().product::<usize>() as f64;
        let mut out = Fp8Bytes::default();
        for (name, t) in &all {
            if t.dtype != Ok(DType::F8E4M3) {
                continue;
            }
            let scales =
                SCALE_SUFFIXES.iter().find_map(|s| all.get(format!("{name}{s}").as_str())).map_or(0.0, |s| elems(s));
            let saved = elems(t) - 4.0 * scales;
            if name.contains(".experts.") {
                out.experts += saved;
            } else {
                out.dense += saved;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
    }

    #[test]
    fn counts_a_byte_a_weight_less_the_scales() {
        // qwen3_fp8: 2 layers of q, o, gate, up, down (8192 weights, 6 scales of 48 x 48 blocks
        // each) and k, v (4096 weights, 4 scales each).
        let per_layer = 5.0 * (8192.0 - 4.0 * 6.0) + 2.0 * (4096.0 - 4.0 * 4.0);
        assert_eq!(Fp8Bytes::of(&fixture("qwen3_fp8")), Fp8Bytes { dense: 2.0 * per_layer, experts: 0.0 });
        assert_eq!(Fp8Bytes::of(&fixture("qwen3")), Fp8Bytes::default());
        let moe = Fp8Bytes::of(&fixture("qwen3_moe_fp8"));
        assert!(moe.experts > 0.0 && moe.dense > 0.0, "{moe:?}");
    }
}
