//! Which instructions run the integer dot products of the int8 path, chosen once per backend.
//!
//! Every choice computes the same i32 lane sums (integer sums are exact in any order) and then
//! the same f32 operations, so all give the same bits; they differ only in speed.

/// Instructions of the int8 path's integer dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntDot {
    /// Plain Rust.
    Portable,
    /// AVX2 `maddubs` (u8 x i8 pairs to i16) then `madd` (i16 pairs to i32).
    Avx2,
    /// AVX-VNNI on 256-bit registers: `dpbusd` (u8 x i8 quads into i32) and `dpwssd`.
    AvxVnni,
    /// AVX-512 F/BW/VNNI on 512-bit registers: two 32-weight chunks per instruction.
    Avx512Vnni,
    /// Chosen per matmul ([`IntDot::pick`]): k-quant weights against 4 rows or more on AVX-512
    /// VNNI, everything else on AVX-VNNI (AVX2 where a CPU lacks it), as measured fastest
    /// (docs/perf.md). Needs one of the two VNNI sets.
    Mixed,
}

impl IntDot {
    /// The default choice on this CPU: the per-shape VNNI mix where it has VNNI (measured
    /// fastest on whole models, docs/perf.md), else AVX2 where it has it.
    pub fn detect() -> IntDot {
        [IntDot::Mixed, IntDot::Avx2].into_iter().find(|d| d.available()).unwrap_or(IntDot::Portable)
    }

    /// The widest choice this CPU supports.
    pub fn widest() -> IntDot {
        [IntDot::Avx512Vnni, IntDot::AvxVnni, IntDot::Avx2]
            .into_iter()
            .find(|d| d.available())
            .unwrap_or(IntDot::Portable)
    }

    /// The instructions of one matmul over `rows` activation rows, k-quant weights or not: `self`,
    /// or for [`IntDot::Mixed`] its per-shape choice. Every choice gives the same bits.
    pub fn pick(self, k_quant: bool, rows: usize) -> IntDot {
        if self != IntDot::Mixed {
            return self;
        }
        if k_quant && rows >= 4 && IntDot::Avx512Vnni.available() {
            IntDot::Avx512Vnni
        } else if IntDot::AvxVnni.available() {
            IntDot::AvxVnni
        } else {
            IntDot::Avx2
        }
    }

    /// Every choice, in the order of [`IntDot::name`]'s names.
    pub const ALL: [IntDot; 5] = [IntDot::Portable, IntDot::Avx2, IntDot::AvxVnni, IntDot::Avx512Vnni, IntDot::Mixed];

    /// The choice named `name` ([`IntDot::name`]).
    pub fn from_name(name: &str) -> Option<IntDot> {
        IntDot::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether this CPU supports `self` (every non-portable choice also needs AVX2, FMA and F16C).
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = crate::Simd::Avx2.available();
            match self {
                IntDot::Portable => true,
                IntDot::Avx2 => avx2,
                IntDot::AvxVnni => avx2 && is_x86_feature_detected!("avxvnni"),
                IntDot::Avx512Vnni => {
                    avx2 && is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bw")
                        && is_x86_feature_detected!("avx512vnni")
                }
                IntDot::Mixed => IntDot::AvxVnni.available() || IntDot::Avx512Vnni.available(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == IntDot::Portable
        }
    }

    /// Lower-case name for logs and banners.
    pub fn name(self) -> &'static str {
        match self {
            IntDot::Portable => "portable",
            IntDot::Avx2 => "avx2",
            IntDot::AvxVnni => "avx-vnni",
            IntDot::Avx512Vnni => "avx512-vnni",
            IntDot::Mixed => "mixed-vnni",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_picks_an_available_choice_and_portable_always_is() {
        assert!(IntDot::detect().available());
        assert!(IntDot::Portable.available());
        let want = if IntDot::Mixed.available() {
            IntDot::Mixed
        } else if IntDot::Avx2.available() {
            IntDot::Avx2
        } else {
            IntDot::Portable
        };
        assert_eq!(IntDot::detect(), want, "the VNNI mix, else AVX2");
        assert!(IntDot::widest().available());
        if IntDot::Avx512Vnni.available() {
            assert_eq!(IntDot::widest(), IntDot::Avx512Vnni);
        }
        assert_eq!(IntDot::AvxVnni.name(), "avx-vnni");
        for d in IntDot::ALL {
            assert_eq!(IntDot::from_name(d.name()), Some(d));
        }
    }

    #[test]
    fn mixed_picks_a_concrete_available_choice_per_shape() {
        for d in [IntDot::Portable, IntDot::Avx2, IntDot::AvxVnni, IntDot::Avx512Vnni] {
            assert_eq!(d.pick(true, 128), d, "a concrete choice is kept");
        }
        if !IntDot::Mixed.available() {
            return;
        }
        for (k, rows) in [(true, 1), (true, 3), (true, 4), (true, 128), (false, 1), (false, 128)] {
            let d = IntDot::Mixed.pick(k, rows);
            assert!(d.available() && d != IntDot::Mixed && d != IntDot::Portable, "{k} {rows}: {d:?}");
        }
        if IntDot::Avx512Vnni.available() {
            assert_eq!(IntDot::Mixed.pick(true, 4), IntDot::Avx512Vnni);
            assert_ne!(IntDot::Mixed.pick(true, 3), IntDot::Avx512Vnni);
            assert_ne!(IntDot::Mixed.pick(false, 128), IntDot::Avx512Vnni);
        }
    }
}
