//! Dequantization against the `gguf` Python package, bit for bit, on random blocks of every
//! supported type (fixture made by scripts/make_quant_golden.py).

use tf_core::QuantType;
use tf_formats::gguf::GgmlType;
use tf_formats::quant::dequantize;

const GOLDEN: &[u8] = include_bytes!("fixtures/quant_golden.bin");

/// Reads little-endian fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
}

/// (type, block bytes, expected f32 values) for every record of the fixture.
fn records() -> Vec<(QuantType, Vec<u8>, Vec<f32>)> {
    let mut r = Reader(GOLDEN);
    assert_eq!(r.take(4), b"TFQG");
    assert_eq!(r.u32(), 1);
    let n = r.u32();
    let mut out = Vec::new();
    for _ in 0..n {
        let code = r.u32();
        let Some(tf_core::DType::Quant(q)) = GgmlType::from_code(code).and_then(|t| t.dtype()) else {
            panic!("ggml type {code} is not a supported quantized type")
        };
        let n_bytes = r.u32() as usize;
        let bytes = r.take(n_bytes).to_vec();
        let n_floats = r.u32() as usize;
        let values = r.take(4 * n_floats).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        out.push((q, bytes, values));
    }
    assert!(r.0.is_empty(), "trailing bytes in the fixture");
    out
}

#[test]
fn matches_gguf_python_bit_for_bit() {
    let recs = records();
    assert_eq!(recs.len(), 10, "one record per supported quantized type");
    for (q, bytes, expected) in recs {
        let got = dequantize(q, &bytes);
        assert_eq!(got.len(), expected.len(), "{q:?}");
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g.to_bits(), e.to_bits(), "{q:?} weight {i}: got {g}, gguf-py {e}");
        }
    }
}

#[test]
fn ggml_codes_round_trip() {
    for (q, _, _) in records() {
        let t = GgmlType::from_dtype(tf_core::DType::Quant(q)).unwrap();
        assert_eq!(t.name(), q.name());
        assert_eq!(t.block(), (q.block_len(), q.block_bytes()));
    }
}
