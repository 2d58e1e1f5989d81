//! Instruction-set selection and the small vector kernels (dot, weighted row sums, scale) shared
//! by the ops, each with one fixed order that the portable and AVX2 paths follow bit for bit.
//!
//! The order of every dot product: one 8-lane accumulator, `acc[l] = fma(a[k+l], b[k+l], acc[l])`
//! for k = 0, 8, 16, ...; the `len % 8` tail zero-padded into one more 8-lane fma; then the lanes
//! summed as `t[i] = acc[i] + acc[i+4]`, then `(t[0] + t[2]) + (t[1] + t[3])` (see [`hsum8`]).

use crate::kv::KvElem;

/// Instruction set used by the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    /// Plain Rust in the same 8-lane order; runs on any CPU.
    Portable,
    /// x86-64 AVX2 with FMA and F16C.
    Avx2,
}

impl Simd {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Simd {
        if Simd::Avx2.available() { Simd::Avx2 } else { Simd::Portable }
    }

    /// Whether this CPU supports `self`.
    pub fn available(self) -> bool {
        match self {
            Simd::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Simd::Avx2 => false,
        }
    }

    /// Lower-case name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Portable => "portable",
            Simd::Avx2 => "avx2",
        }
    }

    /// `a . b` in the fixed order (over the shorter length).
    pub(crate) fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            // SAFETY: a backend holds `Simd::Avx2` only where `available()` said so.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { avx2_dot(a, b) },
            _ => Portable::dot(a, b),
        }
    }
}

/// The vector kernels, implemented once per instruction set (zero-sized marker types). `b`
/// and `v` are f32 or a KV pool's 16-bit values, widened to f32 as they are read: the same
/// products in the same order as over their widened copy.
pub(crate) trait Vops {
    /// `a . b` over the shorter length, in the fixed order.
    ///
    /// # Safety
    /// The CPU supports the implementation's instruction set.
    unsafe fn dot<E: KvElem>(a: &[f32], b: &[E]) -> f32;
    /// Four dot products of `a` with `b[i]`, each in the fixed order (four chains in flight).
    ///
    /// # Safety
    /// As for [`Vops::dot`].
    unsafe fn dot4<E: KvElem>(a: &[f32], b: [&[E]; 4]) -> [f32; 4];
    /// `acc[i] = fma(e[t], v[offs[t] + i], acc[i])` for t in order: a weighted sum of rows of `v`.
    /// Panics if a row passes the end of `v`.
    ///
    /// # Safety
    /// As for [`Vops::dot`].
    unsafe fn accumulate<E: KvElem>(acc: &mut [f32], e: &[f32], v: &[E], offs: &[usize]);
    /// `y[i] *= s`.
    ///
    /// # Safety
    /// As for [`Vops::dot`].
    unsafe fn scale(y: &mut [f32], s: f32);
}

/// Lane reduction of the fixed order.
#[inline(always)]
pub(crate) fn hsum8(acc: [f32; 8]) -> f32 {
    let t = [acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// Plain Rust kernels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable;

impl Portable {
    /// Safe form of [`Vops::dot`]: the portable path needs no CPU feature. Lane `k % 8`, the last
    /// chunk zero-padded; `b`'s chunks widened to f32 as they are read.
    #[inline(always)]
    pub(crate) fn dot<E: KvElem>(a: &[f32], b: &[E]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = [0.0f32; 8];
        for k0 in (0..n).step_by(8) {
            let len = (n - k0).min(8);
            let (mut x, mut y) = ([0.0f32; 8], [0.0f32; 8]);
            x[..len].copy_from_slice(&a[k0..k0 + len]);
            E::widen(&b[k0..k0 + len], &mut y[..len]);
            for l in 0..8 {
                acc[l] = x[l].mul_add(y[l], acc[l]);
            }
        }
        hsum8(acc)
    }
}

impl Vops for Portable {
    #[inline(always)]
    unsafe fn dot<E: KvElem>(a: &[f32], b: &[E]) -> f32 {
        Portable::dot(a, b)
    }

    #[inline(always)]
    unsafe fn dot4<E: KvElem>(a: &[f32], b: [&[E]; 4]) -> [f32; 4] {
        // SAFETY: the portable kernels need no CPU feature.
        b.map(|bi| unsafe { <Self as Vops>::dot(a, bi) })
    }

    #[inline(always)]
    unsafe fn accumulate<E: KvElem>(acc: &mut [f32], e: &[f32], v: &[E], offs: &[usize]) {
        let d = acc.len();
        for (&s, &o) in e.iter().zip(offs) {
            assert!(o + d <= v.len(), "accumulate: row out of range");
            for (k, a) in acc.iter_mut().enumerate() {
                *a = s.mul_add(E::at(v, o + k), *a);
            }
        }
    }

    #[inline(always)]
    unsafe fn scale(y: &mut [f32], s: f32) {
        y.iter_mut().for_each(|v| *v *= s);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::{Avx2, avx2_dot, hsum};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Vops;
    use crate::kv::KvElem;
    use std::arch::x86_64::*;

    /// AVX2 + FMA kernels; callers guarantee the CPU has them.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Avx2;

    /// [`super::hsum8`] on a register.
    ///
    /// # Safety
    /// The CPU supports AVX.
    #[inline(always)]
    pub(crate) unsafe fn hsum(v: __m256) -> f32 {
        unsafe {
            let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let u = _mm_add_ps(t, _mm_movehl_ps(t, t));
            _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps::<1>(u, u)))
        }
    }

    /// Up to 8 values from `p` as f32, zero-padded.
    #[inline(always)]
    unsafe fn load_tail<E: KvElem>(p: &[E]) -> __m256 {
        let mut buf = [0.0f32; 8];
        E::widen(p, &mut buf[..p.len()]);
        unsafe { _mm256_loadu_ps(buf.as_ptr()) }
    }

    /// `acc[i..i + 8R] += e[t] * v[offs[t] + i..]` over all t, held in R registers.
    ///
    /// # Safety
    /// `i + 8 * R <= acc.len()`, every `offs[t] + acc.len() <= v.len()`, and the CPU has AVX2 + FMA.
    #[inline(always)]
    unsafe fn acc_block<const R: usize, E: KvElem>(acc: &mut [f32], e: &[f32], v: &[E], offs: &[usize], i: usize) {
        unsafe {
            let a = acc.as_mut_ptr().add(i);
            let mut r = [_mm256_setzero_ps(); R];
            for (u, ru) in r.iter_mut().enumerate() {
                *ru = _mm256_loadu_ps(a.add(8 * u));
            }
            for (&s, &o) in e.iter().zip(offs) {
                let (sv, p) = (_mm256_set1_ps(s), v.as_ptr().add(o + i));
                for (u, ru) in r.iter_mut().enumerate() {
                    *ru = _mm256_fmadd_ps(sv, E::load8(p.add(8 * u)), *ru);
                }
            }
            for (u, ru) in r.iter().enumerate() {
                _mm256_storeu_ps(a.add(8 * u), *ru);
            }
        }
    }

    /// [`Vops::dot`] as a callable entry point.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn avx2_dot(a: &[f32], b: &[f32]) -> f32 {
        unsafe { <Avx2 as Vops>::dot(a, b) }
    }

    impl Vops for Avx2 {
        #[inline(always)]
        unsafe fn dot<E: KvElem>(a: &[f32], b: &[E]) -> f32 {
            let n = a.len().min(b.len());
            let full = n & !7;
            unsafe {
                let mut acc = _mm256_setzero_ps();
                let mut k = 0;
                while k < full {
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(k)), E::load8(b.as_ptr().add(k)), acc);
                    k += 8;
                }
                if full < n {
                    acc = _mm256_fmadd_ps(load_tail(&a[full..n]), load_tail(&b[full..n]), acc);
                }
                hsum(acc)
            }
        }

        #[inline(always)]
        unsafe fn dot4<E: KvElem>(a: &[f32], b: [&[E]; 4]) -> [f32; 4] {
            let n = b.iter().fold(a.len(), |n, bi| n.min(bi.len()));
            if b.iter().any(|bi| bi.len() != n) || a.len() != n {
                return unsafe { b.map(|bi| Self::dot(a, bi)) };
            }
            let full = n & !7;
            unsafe {
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut k = 0;
                while k < full {
                    let av = _mm256_loadu_ps(a.as_ptr().add(k));
                    for (c, bi) in acc.iter_mut().zip(b) {
                        *c = _mm256_fmadd_ps(av, E::load8(bi.as_ptr().add(k)), *c);
                    }
                    k += 8;
                }
                if full < n {
                    let av = load_tail(&a[full..]);
                    for (c, bi) in acc.iter_mut().zip(b) {
                        *c = _mm256_fmadd_ps(av, load_tail(&bi[full..]), *c);
                    }
                }
                [hsum(acc[0]), hsum(acc[1]), hsum(acc[2]), hsum(acc[3])]
            }
        }

        #[inline(always)]
        unsafe fn accumulate<E: KvElem>(acc: &mut [f32], e: &[f32], v: &[E], offs: &[usize]) {
            let (d, n) = (acc.len(), e.len().min(offs.len()));
            let (e, offs) = (&e[..n], &offs[..n]);
            assert!(
                offs.iter().all(|&o| o.checked_add(d).is_some_and(|end| end <= v.len())),
                "accumulate: row out of range"
            );
            let full = d & !7;
            let mut i = 0;
            // SAFETY: every row `offs[t]..offs[t] + d` lies inside `v` (checked above); `i + 8 * R <= d`.
            unsafe {
                while i + 64 <= full {
                    acc_block::<8, E>(acc, e, v, offs, i);
                    i += 64;
                }
                while i + 32 <= full {
                    acc_block::<4, E>(acc, e, v, offs, i);
                    i += 32;
                }
                while i < full {
                    acc_block::<1, E>(acc, e, v, offs, i);
                    i += 8;
                }
            }
            for (k, a) in acc.iter_mut().enumerate().skip(full) {
                for (&s, &o) in e.iter().zip(offs) {
                    *a = s.mul_add(E::at(v, o + k), *a);
                }
            }
        }

        #[inline(always)]
        unsafe fn scale(y: &mut [f32], s: f32) {
            y.iter_mut().for_each(|v| *v *= s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn portable_dot_follows_the_documented_order() {
        let mut rng = Rng::new(1);
        for n in [0, 1, 7, 8, 9, 67, 131] {
            let (a, b) = (rng.vec(n), rng.vec(n));
            let mut acc = [0.0f32; 8];
            for k in 0..n.next_multiple_of(8) {
                let (x, y) = (a.get(k).copied().unwrap_or(0.0), b.get(k).copied().unwrap_or(0.0));
                acc[k % 8] = x.mul_add(y, acc[k % 8]);
            }
            assert_eq!(Portable::dot(&a, &b).to_bits(), hsum8(acc).to_bits(), "n = {n}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernels_equal_portable_bit_for_bit() {
        if !Simd::Avx2.available() {
            return;
        }
        let mut rng = Rng::new(2);
        for n in [1, 5, 8, 16, 67, 128, 131] {
            let (a, b) = (rng.vec(n), rng.vec(n));
            let bs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(n)).collect();
            let b4 = [&bs[0][..], &bs[1][..], &bs[2][..], &bs[3][..]];
            // SAFETY: AVX2 and FMA were detected above.
            unsafe {
                assert_eq!(avx2_dot(&a, &b).to_bits(), Portable::dot(&a, &b).to_bits());
                let (x, y) = (Avx2::dot4(&a, b4), Portable::dot4(&a, b4));
                assert_eq!(x.map(f32::to_bits), y.map(f32::to_bits));
                let (e, v) = (rng.vec(9), rng.vec(21 * n));
                let offs: Vec<usize> = (0..9).map(|t| (t * 7 % 19) * n + t % 3).collect();
                let (mut y1, mut y2) = (b.clone(), b.clone());
                Avx2::accumulate(&mut y1, &e, &v, &offs);
                Portable::accumulate(&mut y2, &e, &v, &offs);
                assert_eq!(y1, y2);
            }
        }
    }

    /// Over 16-bit rows, each kernel on either instruction set gives the f32 kernel's bits over
    /// the rows widened first (what the gathered path reads).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn half_rows_read_in_place_equal_their_widened_copy() {
        fn check<E: KvElem>(narrow: impl Fn(&[f32]) -> Vec<E>) {
            let mut rng = Rng::new(3);
            for n in [1, 5, 8, 16, 67, 128, 131] {
                let a = rng.vec(n);
                let bs: Vec<Vec<E>> = (0..4).map(|_| narrow(&rng.vec(n))).collect();
                let wide = |x: &[E]| {
                    let mut w = vec![0.0; x.len()];
                    E::widen(x, &mut w);
                    w
                };
                let ws: Vec<Vec<f32>> = bs.iter().map(|b| wide(b)).collect();
                let (b4, w4) = ([&bs[0][..], &bs[1], &bs[2], &bs[3]], [&ws[0][..], &ws[1], &ws[2], &ws[3]]);
                let (e, v) = (rng.vec(9), narrow(&rng.vec(21 * n)));
                let offs: Vec<usize> = (0..9).map(|t| (t * 7 % 19) * n + t % 3).collect();
                let want_acc = {
                    let mut y = a.clone();
                    // SAFETY: the portable kernels need no CPU feature.
                    unsafe { Portable::accumulate(&mut y, &e, &wide(&v), &offs) };
                    y
                };
                // SAFETY: the portable kernels need no CPU feature; AVX2 is checked before use.
                unsafe {
                    let want = Portable::dot4(&a, w4).map(f32::to_bits);
                    assert_eq!(Portable::dot4(&a, b4).map(f32::to_bits), want);
                    assert_eq!(<Portable as Vops>::dot(&a, &bs[1][..]).to_bits(), want[1]);
                    let mut y = a.clone();
                    Portable::accumulate(&mut y, &e, &v, &offs);
                    assert_eq!(y, want_acc);
                    if Simd::Avx2.available() {
                        assert_eq!(avx2_half(&a, b4).map(f32::to_bits), want, "n = {n}");
                        let mut y = a.clone();
                        avx2_half_acc(&mut y, &e, &v, &offs);
                        assert_eq!(y, want_acc, "n = {n}");
                    }
                }
            }
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2_half<E: KvElem>(a: &[f32], b: [&[E]; 4]) -> [f32; 4] {
            unsafe { Avx2::dot4(a, b) }
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2_half_acc<E: KvElem>(y: &mut [f32], e: &[f32], v: &[E], offs: &[usize]) {
            unsafe { Avx2::accumulate(y, e, v, offs) }
        }
        check(|x| x.iter().map(|&v| half::bf16::from_f32(v)).collect());
        check(|x| x.iter().map(|&v| half::f16::from_f32(v)).collect());
    }
}
