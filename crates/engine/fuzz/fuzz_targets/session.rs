//! Fuzzes the session file check: any bytes must give a verified session or a `SessionError`,
//! never a panic or an allocation past the input; a file accepted alone is accepted against a
//! model of its own layout with exactly the contents its header implies. Each input is tried as
//! given and resealed (its digest recomputed), so the checks after the digest are reached too.
//! Seeds: crates/engine/tests/corpus/session (`scripts/fuzz.sh` runs it as CI does).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_core::Vocab;
use tf_engine::session::{SessionLayout, reseal, verify};

fn check(data: &[u8]) {
    let Ok((h, None)) = verify(data, data.len() as u64, "fuzz", None) else { return };
    let state = h.state.clone();
    let Some(vocab) = Vocab::new(1 << 20) else { return };
    let layout = SessionLayout {
        fingerprint: h.fingerprint,
        kv_dtype: h.kv_dtype,
        ranks: h.ranks,
        kv_widths: h.kv_widths.clone(),
        block_size: h.block_size,
        max_tokens: h.num_tokens,
        vocab,
        state,
    };
    match verify(data, data.len() as u64, "fuzz", Some(&layout)) {
        Ok((again, Some(s))) => {
            assert_eq!(again, h);
            assert_eq!(s.ids.len(), h.num_tokens);
            assert_eq!(s.layers.len(), h.kv_widths.len());
            let per_layer = |w: usize| 2 * h.kv_dtype.kv_bytes(h.num_tokens * w);
            assert!(s.layers.iter().zip(&h.kv_widths).all(|(l, &w)| l.len() == per_layer(w)));
            assert_eq!(s.state.len(), h.state.len());
            assert!(s.state.iter().zip(&h.state).all(|(b, shape)| b.len() == shape.slot_bytes()));
        }
        Ok((_, None)) => panic!("checked against a model but no contents returned"),
        Err(e) => assert!(e.to_string().contains("outside the vocabulary"), "{e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut sealed = data.to_vec();
    reseal(&mut sealed);
    check(&sealed);
});
