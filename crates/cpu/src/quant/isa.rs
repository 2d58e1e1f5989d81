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
}

impl IntDot {
    /// The default choice on this CPU: AVX2 where it has it. The VNNI choices give the same
    /// bits but are not the default yet: measured alone they win at prefill's row counts and
    /// lose at one row (docs/perf.md), and a whole-model run on a quiet machine has not
    /// settled it; `CpuOptions::int_dot` takes them.
    pub fn detect() -> IntDot {
        if IntDot::Avx2.available() { IntDot::Avx2 } else { IntDot::Portable }
    }

    /// The widest choice this CPU supports.
    pub fn widest() -> IntDot {
        [IntDot::Avx512Vnni, IntDot::AvxVnni, IntDot::Avx2]
            .into_iter()
            .find(|d| d.available())
            .unwrap_or(IntDot::Portable)
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
        assert_eq!(IntDot::detect() == IntDot::Avx2, IntDot::Avx2.available(), "AVX2 is the default");
        assert!(IntDot::widest().available());
        if IntDot::Avx512Vnni.available() {
            assert_eq!(IntDot::widest(), IntDot::Avx512Vnni);
        }
        assert_eq!(IntDot::AvxVnni.name(), "avx-vnni");
    }
}
