//! A model's identity for saved state: SHA-256 over its config and, for every tensor in name
//! order, its name, type, shape and every byte of its data, cut to 64 bits. Each tensor is
//! hashed in 4 MiB chunks on every core (rayon) and the chunk digests are hashed in order, so
//! the value depends on the bytes alone, never on the machine or the thread count; checkpoints
//! that differ in any byte of any tensor or of the config get different fingerprints with
//! probability 1 - 2^-64.

use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};
use tf_formats::TensorView;

/// Bytes per independently hashed chunk of a tensor.
const CHUNK: usize = 4 << 20;

/// Prefix of every fingerprint's input: names the scheme (a change of meaning changes it).
const DOMAIN: &[u8] = b"tensorfold fingerprint: sha-256 of config and all tensor bytes, 4 MiB chunks\0";

/// One tensor as the fingerprint sees it.
pub struct Part<'a> {
    /// Its name in the checkpoint.
    pub name: &'a str,
    /// Its element type's name (a dtype, or a GGUF ggml type).
    pub kind: &'a str,
    /// Its dimensions.
    pub shape: &'a [usize],
    /// Every byte of its data.
    pub bytes: &'a [u8],
}

/// The fingerprint of `config` (the config's bytes) and `tensors` (in any order).
pub fn fingerprint(config: &[u8], tensors: &[TensorView]) -> u64 {
    let parts = tensors
        .iter()
        .map(|t| Part { name: &t.name, kind: t.dtype.name(), shape: &t.shape, bytes: t.data.as_bytes() })
        .collect();
    of_parts(config, parts)
}

/// `fingerprint` of a model run otherwise than its checkpoint alone says, the way named by
/// `tag` (LongRoPE's long factors): state saved one way is refused the other.
pub fn with_tag(fingerprint: u64, tag: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(fingerprint.to_le_bytes());
    h.update(tag);
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// The fingerprint of `config` and `parts` (in any order).
pub fn of_parts(config: &[u8], parts: Vec<Part<'_>>) -> u64 {
    // Never stopped, so always a value.
    of_parts_unless(config, parts, &AtomicBool::new(false)).unwrap_or_default()
}

/// `load()` run beside the fingerprint of `config` and `parts` (hashed on other threads while
/// it runs: loading reads, converts and uploads the same bytes, and on a GPU mostly waits for
/// copies); a failed load stops the hashing and returns its error.
pub fn beside<T, E>(config: &[u8], parts: Vec<Part<'_>>, load: impl FnOnce() -> Result<T, E>) -> Result<(T, u64), E> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hash = s.spawn(|| of_parts_unless(config, parts, &stop));
        let loaded = load();
        if loaded.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let fingerprint = hash.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        loaded.map(|l| (l, fingerprint.unwrap_or_default()))
    })
}

/// [`of_parts`], or `None` once `stop` is set (checked before each chunk: a load that failed
/// beside it ends it early).
pub fn of_parts_unless(config: &[u8], mut parts: Vec<Part<'_>>, stop: &AtomicBool) -> Option<u64> {
    parts.sort_by(|a, b| a.name.cmp(b.name));
    let chunks: Vec<(usize, usize)> =
        parts.iter().enumerate().flat_map(|(i, p)| (0..p.bytes.len().div_ceil(CHUNK)).map(move |c| (i, c))).collect();
    let digests: Vec<[u8; 32]> = chunks
        .par_iter()
        .map(|&(i, c)| {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            let b = parts[i].bytes;
            Some(Sha256::digest(b.get(c * CHUNK..b.len().min((c + 1) * CHUNK)).unwrap_or_default()).into())
        })
        .collect::<Option<_>>()?;
    let mut h = Sha256::new();
    let len = |h: &mut Sha256, n: usize| h.update((n as u64).to_le_bytes());
    h.update(DOMAIN);
    len(&mut h, config.len());
    h.update(config);
    len(&mut h, parts.len());
    let mut done = 0;
    for p in &parts {
        for field in [p.name.as_bytes(), p.kind.as_bytes()] {
            len(&mut h, field.len());
            h.update(field);
        }
        len(&mut h, p.shape.len());
        p.shape.iter().for_each(|&d| len(&mut h, d));
        len(&mut h, p.bytes.len());
        let n = p.bytes.len().div_ceil(CHUNK);
        digests[done..done + n].iter().for_each(|d| h.update(d));
        done += n;
    }
    let digest: [u8; 32] = h.finalize().into();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Some(u64::from_le_bytes(first))
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
        let a = fingerprint(b"{}", &[view("a", &[0; 8]), view("b", &[1; 8])]);
        let b = fingerprint(b"{}", &[view("b", &[1; 8]), view("a", &[0; 8])]);
        assert_eq!(a, b);
        assert_ne!(a, fingerprint(b"{}", &[view("a", &[0; 8]), view("b", &[2; 8])]));
        assert_ne!(a, fingerprint(b"{ }", &[view("a", &[0; 8]), view("b", &[1; 8])]));
        assert_ne!(a, fingerprint(b"{}", &[view("a", &[0; 8]), view("c", &[1; 8])]));
    }

    #[test]
    fn one_byte_in_the_middle_of_a_big_tensor_changes_it() {
        let mut big = vec![7u8; 3 * CHUNK + 12_345];
        let a = fingerprint(b"{}", &[view("w", &big)]);
        assert_eq!(a, fingerprint(b"{}", &[view("w", &big)]));
        let mid = big.len() / 2;
        big[mid] ^= 1;
        assert_ne!(a, fingerprint(b"{}", &[view("w", &big)]));
    }

    #[test]
    fn hashed_beside_a_load_or_stopped_by_its_failure() {
        let views = [view("a", &[3; 8]), view("b", &[4; 8])];
        let parts =
            || views.iter().map(|t| Part { name: &t.name, kind: "f32", shape: &t.shape, bytes: t.data.as_bytes() });
        let want = fingerprint(b"{}", &views);
        let got = beside(b"{}", parts().collect(), || Ok::<_, ()>(7));
        assert_eq!(got, Ok((7, want)));
        assert_eq!(beside(b"{}", parts().collect(), || Err::<u8, _>("refused")), Err("refused"));
        let stop = AtomicBool::new(true);
        assert_eq!(of_parts_unless(b"{}", parts().collect(), &stop), None);
    }

    #[test]
    fn bytes_moving_between_tensors_change_it() {
        let a = fingerprint(b"{}", &[view("a", &[0; 4]), view("b", &[0; 8])]);
        assert_ne!(a, fingerprint(b"{}", &[view("a", &[0; 8]), view("b", &[0; 4])]));
    }
}

/// The fingerprint's cost on a realistic size, reported, not asserted.
#[cfg(test)]
mod cost {
    #[test]
    #[ignore = "timing: cargo test -p tf-models fingerprint::cost -- --ignored --nocapture"]
    fn over_one_and_a_half_gigabytes() {
        let (n, size) = (300, 5 << 20);
        let tensors: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; size]).collect();
        let parts = || tensors.iter().enumerate().map(|(i, b)| (format!("t{i}"), b)).collect::<Vec<_>>();
        let named = parts();
        let start = std::time::Instant::now();
        let fp = super::of_parts(
            b"{}",
            named.iter().map(|(n, b)| super::Part { name: n, kind: "bf16", shape: &[], bytes: b }).collect(),
        );
        let took = start.elapsed();
        let gb = (n * size) as f64 / 1e9;
        println!(
            "{gb:.2} GB in {took:?} ({:.2} GB/s, {} threads): {fp:016x}",
            gb / took.as_secs_f64(),
            rayon::current_num_threads()
        );
    }
}
