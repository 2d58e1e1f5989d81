//! Element types of stored weights and activations.

use std::fmt;

/// The storage type of a tensor as read from a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE float32.
    F32,
    /// IEEE float16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 64-bit integer (token ids in golden files).
    I64,
    /// Unsigned bytes: packed MXFP4 codes and their E8M0 scales (gpt-oss), read by the family
    /// that knows their layout.
    U8,
    /// MXFP4 weights in ggml's block layout: per 32 weights, an E8M0 scale byte (`2^(e - 127)`)
    /// then 16 bytes of FP4 E2M1 codes, weight `j` in byte `j`'s low nibble and weight `j + 16`
    /// in its high one. Held packed; dequantized row by row into the f32 kernels.
    Mxfp4,
    /// FP8 E4M3 as torch's `float8_e4m3fn` (no infinities; 0x7F and 0xFF are NaN): a weight
    /// that needs its scales to mean anything.
    F8E4M3,
    /// A GGML block-quantized type (weights stay quantized in memory).
    Quant(QuantType),
}

/// GGML block-quantized weight types (llama.cpp's `ggml_type`), block layout as in ggml.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// 32 weights: f16 scale + 16 bytes of 4-bit values.
    Q4_0,
    /// 32 weights: f16 scale, f16 min + 16 bytes of 4-bit values.
    Q4_1,
    /// 32 weights: f16 scale, 4 bytes of high bits + 16 bytes of low nibbles.
    Q5_0,
    /// 32 weights: f16 scale, f16 min, 4 bytes of high bits + 16 bytes of low nibbles.
    Q5_1,
    /// 32 weights: f16 scale + 32 signed bytes.
    Q8_0,
    /// 256 weights in 16 groups of 16, 2-bit.
    Q2K,
    /// 256 weights in 16 groups of 16, 3-bit.
    Q3K,
    /// 256 weights in 8 groups of 32, 4-bit.
    Q4K,
    /// 256 weights in 8 groups of 32, 5-bit.
    Q5K,
    /// 256 weights in 16 groups of 16, 6-bit.
    Q6K,
}

impl QuantType {
    /// Weights per block.
    pub fn block_len(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 | QuantType::Q8_0 => 32,
            _ => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4_0 => 18,
            QuantType::Q4_1 => 20,
            QuantType::Q5_0 => 22,
            QuantType::Q5_1 => 24,
            QuantType::Q8_0 => 34,
            QuantType::Q2K => 84,
            QuantType::Q3K => 110,
            QuantType::Q4K => 144,
            QuantType::Q5K => 176,
            QuantType::Q6K => 210,
        }
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q5_0 => "q5_0",
            QuantType::Q5_1 => "q5_1",
            QuantType::Q8_0 => "q8_0",
            QuantType::Q2K => "q2_k",
            QuantType::Q3K => "q3_k",
            QuantType::Q4K => "q4_k",
            QuantType::Q5K => "q5_k",
            QuantType::Q6K => "q6_k",
        }
    }
}

impl DType {
    /// Bytes per element of a plain type; bytes per block of a quantized one.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::F8E4M3 | DType::U8 => 1,
            DType::Mxfp4 => 17,
            DType::Quant(q) => q.block_bytes(),
        }
    }

    /// Bytes that `numel` elements occupy; `None` on overflow or a partial quant block.
    pub fn bytes_for(self, numel: usize) -> Option<usize> {
        match self {
            DType::Quant(q) if !numel.is_multiple_of(q.block_len()) => None,
            DType::Quant(q) => (numel / q.block_len()).checked_mul(q.block_bytes()),
            DType::Mxfp4 if !numel.is_multiple_of(32) => None,
            DType::Mxfp4 => (numel / 32).checked_mul(17),
            d => numel.checked_mul(d.size()),
        }
    }

    /// Bytes that `n` values of a KV cache of this type take: whole blocks of a quantized type,
    /// a partial one rounded up (a pool refuses rows that are not whole blocks), saturating.
    pub fn kv_bytes(self, n: usize) -> usize {
        match self {
            DType::Quant(q) => n.div_ceil(q.block_len()).saturating_mul(q.block_bytes()),
            d => n.saturating_mul(d.size()),
        }
    }

    /// Whether a weight matrix may be stored in this type (float, FP8 or quantized).
    pub fn is_weight(self) -> bool {
        self.is_float() || matches!(self, DType::Quant(_) | DType::F8E4M3 | DType::Mxfp4)
    }

    /// Whether this type can hold model weights for the float backends.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Lower-case name as used on the command line (`bf16`, `f16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Mxfp4 => "mxfp4",
            DType::F8E4M3 => "f8_e4m3",
            DType::Quant(q) => q.name(),
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<DType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" | "half" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
