//! Many consecutive Philox blocks at once ([`uniform_blocks`]): the same uniforms as
//! [`crate::rng::uniform_block`] one block at a time, bit for bit, computed in lanes of
//! [`LANES`] counters so the compiler keeps them in vector registers (32 x 32 -> 64-bit
//! multiplies four or eight to an instruction where AVX2 or AVX-512 is present). A sampled row
//! that races a hundred thousand candidates draws that many uniforms.

use crate::rng::{BUMP, GUMBEL_STREAM, MUL, to_unit};

/// Counters computed together.
const LANES: usize = 16;

/// `out[j] = uniform_block(seed, position, first + j)` for every `j` (counters past `u32::MAX`
/// wrap, as block indices never do for ids of a row).
pub fn uniform_blocks(seed: u64, position: u64, first: u32, out: &mut [[f32; 4]]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F, the only feature the function is compiled for.
            return unsafe { blocks_avx512(seed, position, first, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, the only feature the function is compiled for.
            return unsafe { blocks_avx2(seed, position, first, out) };
        }
    }
    blocks(seed, position, first, out)
}

/// [`blocks`] compiled for AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn blocks_avx512(seed: u64, position: u64, first: u32, out: &mut [[f32; 4]]) {
    blocks(seed, position, first, out)
}

/// [`blocks`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn blocks_avx2(seed: u64, position: u64, first: u32, out: &mut [[f32; 4]]) {
    blocks(seed, position, first, out)
}

/// [`uniform_blocks`], [`LANES`] counters at a time and the rest one by one.
#[inline(always)]
fn blocks(seed: u64, position: u64, first: u32, out: &mut [[f32; 4]]) {
    let key = [seed as u32, (seed >> 32) as u32];
    let (lo, hi) = (position as u32, (position >> 32) as u32);
    let mut start = first;
    for group in out.chunks_mut(LANES) {
        let mut c = [[0u32; LANES]; 4];
        for (l, c0) in c[0].iter_mut().enumerate() {
            *c0 = start.wrapping_add(l as u32);
        }
        c[1] = [GUMBEL_STREAM; LANES];
        c[2] = [lo; LANES];
        c[3] = [hi; LANES];
        lanes(&mut c, key);
        for (l, o) in group.iter_mut().enumerate() {
            *o = [to_unit(c[0][l]), to_unit(c[1][l]), to_unit(c[2][l]), to_unit(c[3][l])];
        }
        start = start.wrapping_add(LANES as u32);
    }
}

/// Philox4x32-10 over [`LANES`] counters kept word by word (`c[w][lane]`), as
/// [`crate::rng::philox4x32_10`] computes one.
#[inline(always)]
fn lanes(c: &mut [[u32; LANES]; 4], key: [u32; 2]) {
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(BUMP[0]), k[1].wrapping_add(BUMP[1])];
        }
        let mut n = [[0u32; LANES]; 4];
        for l in 0..LANES {
            let p0 = u64::from(MUL[0]) * u64::from(c[0][l]);
            let p1 = u64::from(MUL[1]) * u64::from(c[2][l]);
            n[0][l] = (p1 >> 32) as u32 ^ c[1][l] ^ k[0];
            n[1][l] = p1 as u32;
            n[2][l] = (p0 >> 32) as u32 ^ c[3][l] ^ k[1];
            n[3][l] = p0 as u32;
        }
        *c = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::uniform_block;

    #[test]
    fn many_blocks_at_once_are_the_blocks_one_at_a_time() {
        for (seed, position, first, n) in
            [(0u64, 0u64, 0u32, 1usize), (42, 7, 250, 37), (u64::MAX, 1 << 40, 37_000, 16), (9, 3, u32::MAX - 5, 20)]
        {
            let mut got = vec![[0.0f32; 4]; n];
            uniform_blocks(seed, position, first, &mut got);
            let want: Vec<[f32; 4]> =
                (0..n as u32).map(|j| uniform_block(seed, position, first.wrapping_add(j))).collect();
            assert_eq!(got, want, "seed {seed} position {position} first {first}");
            // The portable path gives the same bits as the dispatched one.
            let mut portable = vec![[0.0f32; 4]; n];
            blocks(seed, position, first, &mut portable);
            assert_eq!(portable, want);
        }
    }
}
