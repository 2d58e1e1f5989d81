//! Philox4x32-10, the counter-based RNG of Random123 (Salmon et al., "Parallel random numbers:
//! as easy as 1, 2, 3", SC'11): a draw is a pure function of (key, counter), so a sampled token
//! depends on (seed, position) only, never on batching or on speculative drafting. Also the
//! Gumbel noise made from it, which backends use to narrow a sampled row's candidates.

/// Round multipliers of Philox4x32.
pub(crate) const MUL: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
/// Key schedule increments (Weyl sequence) of Philox4x32.
pub(crate) const BUMP: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
/// Counter word that separates the Gumbel-noise stream from any other use of the same seed.
pub(crate) const GUMBEL_STREAM: u32 = 0;
/// 2^-23: the spacing of the unit values made from the top 23 bits of a draw.
const UNIT: f32 = 1.0 / 8_388_608.0;

/// The Philox4x32 block function with 10 rounds.
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(BUMP[0]), k[1].wrapping_add(BUMP[1])];
        }
        let p0 = u64::from(MUL[0]) * u64::from(c[0]);
        let p1 = u64::from(MUL[1]) * u64::from(c[2]);
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

/// Maps a draw to (0, 1), both ends excluded: the top 23 bits plus one half, times 2^-23,
/// is exact in `f32` and lies in [2^-24, 1 - 2^-24].
#[inline]
pub fn to_unit(bits: u32) -> f32 {
    ((bits >> 9) as f32 + 0.5) * UNIT
}

/// A bound above every Gumbel draw: the largest uniform, 1 - 2^-24, gives about 16.64.
pub const GUMBEL_BOUND: f32 = 17.0;

/// Gumbel noise `-ln(-ln(u))` of a uniform in (0, 1).
#[inline]
pub fn gumbel(u: f32) -> f32 {
    -(-u.ln()).ln()
}

/// The four uniforms of indices `4 * block .. 4 * block + 4` for (seed, position).
#[inline]
pub fn uniform_block(seed: u64, position: u64, block: u32) -> [f32; 4] {
    let key = [seed as u32, (seed >> 32) as u32];
    let counter = [block, GUMBEL_STREAM, position as u32, (position >> 32) as u32];
    philox4x32_10(counter, key).map(to_unit)
}

/// A uniform in (0, 1) that depends only on (seed, position, index).
#[inline]
pub fn uniform(seed: u64, position: u64, index: u32) -> f32 {
    uniform_block(seed, position, index / 4)[(index % 4) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's `tests/kat_vectors`, the three `philox4x32 10` lines: counter, key, output.
    const KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        ([0; 4], [0; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
        ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];

    #[test]
    fn known_answers() {
        for (counter, key, want) in KAT {
            assert_eq!(philox4x32_10(counter, key), want, "counter {counter:08x?}");
        }
    }

    #[test]
    fn unit_range_excludes_both_ends() {
        assert_eq!(to_unit(0), 1.0 / 16_777_216.0);
        assert_eq!(to_unit(u32::MAX), 1.0 - 1.0 / 16_777_216.0);
        assert!(to_unit(u32::MAX) < 1.0 && to_unit(0) > 0.0);
    }

    #[test]
    fn uniform_is_a_pure_function_of_its_inputs() {
        let a = uniform(42, 7, 1000);
        assert_eq!(a, uniform(42, 7, 1000));
        assert_ne!(a, uniform(43, 7, 1000));
        assert_ne!(a, uniform(42, 8, 1000));
        assert_ne!(a, uniform(42, 7, 1001));
        // High halves of seed and position matter too.
        assert_ne!(a, uniform(42 | 1 << 40, 7, 1000));
        assert_ne!(a, uniform(42, 7 | 1 << 40, 1000));
        let block = uniform_block(42, 7, 250);
        assert_eq!(block[0], a);
        assert_eq!((1000..1004).map(|i| uniform(42, 7, i)).collect::<Vec<_>>(), block);
    }

    #[test]
    fn uniform_moments() {
        let n = 100_000u32;
        let (mut sum, mut sum_sq) = (0.0f64, 0.0f64);
        for i in 0..n {
            let u = f64::from(uniform(1, u64::from(i / 100), i % 100));
            assert!(u > 0.0 && u < 1.0);
            sum += u;
            sum_sq += u * u;
        }
        let mean = sum / f64::from(n);
        let var = sum_sq / f64::from(n) - mean * mean;
        // Standard error of the mean is about 0.0009.
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.002, "variance {var}");
    }
}
