//! A model's identity for saved state: a stable hash (FNV-1a, 64-bit) over its config and, for
//! every tensor in name order, the name, dtype, shape and samples of the bytes at both ends.
//! Equal for the same checkpoint on any machine; different for another fine-tune of the same
//! shapes with overwhelming likelihood.

use tf_formats::TensorView;

/// Bytes sampled from each end of every tensor.
const SAMPLE: usize = 4096;

/// FNV-1a, 64-bit.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Mixes in `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// The fingerprint of `config` (the config's bytes) and `tensors` (in any order).
pub fn fingerprint(config: &[u8], mut tensors: Vec<TensorView>) -> u64 {
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = Fnv::default();
    h.write(config);
    for t in &tensors {
        h.write(t.name.as_bytes());
        h.write(t.dtype.name().as_bytes());
        for d in &t.shape {
            h.write(&(*d as u64).to_le_bytes());
        }
        let b = t.data.as_bytes();
        h.write(&b[..b.len().min(SAMPLE)]);
        h.write(&b[b.len().saturating_sub(SAMPLE)..]);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_core::DType;
    use tf_formats::TensorBytes;

    fn view(name: &str, data: &[u8]) -> TensorView {
        TensorView {
            name: name.into(),
            dtype: DType::F32,
            shape: vec![data.len() / 4],
            data: TensorBytes::from_vec(data),
            file: "x".into(),
        }
    }

    #[test]
    fn order_free_and_content_sensitive() {
        let a = fingerprint(b"{}", vec![view("a", &[0; 8]), view("b", &[1; 8])]);
        let b = fingerprint(b"{}", vec![view("b", &[1; 8]), view("a", &[0; 8])]);
        assert_eq!(a, b);
        assert_ne!(a, fingerprint(b"{}", vec![view("a", &[0; 8]), view("b", &[2; 8])]));
        assert_ne!(a, fingerprint(b"{ }", vec![view("a", &[0; 8]), view("b", &[1; 8])]));
    }
}
