//! A profiling knob, off unless set: `TF_PROFILE_SKIP` (a bit mask) leaves chosen ops of rounds of
//! at most 64 rows out, their outputs unwritten (results are wrong), so that
//! scripts/device/skip.sh can time what each op costs in place, launch overlap included.

/// The ops `TF_PROFILE_SKIP` leaves out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Skip(u32);

impl Skip {
    /// Attention (with its KV write).
    pub(crate) const ATTENTION: u32 = 1;
    /// The fused residual add and RMSNorm.
    pub(crate) const ADD_NORM: u32 = 2;
    /// The gated activation.
    pub(crate) const GLU: u32 = 4;
    /// The q/k norms and RoPE.
    pub(crate) const QK_ROPE: u32 = 8;
    /// Matmuls, except of weights with at least 100000 rows (the vocabulary head).
    pub(crate) const MATMUL: u32 = 16;

    /// The mask from the environment (none when unset or not a number).
    pub(crate) fn from_env() -> Skip {
        Skip(std::env::var("TF_PROFILE_SKIP").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Whether an op of kind `bit` on `rows` rows is left out.
    pub(crate) fn skips(self, bit: u32, rows: usize) -> bool {
        self.0 & bit != 0 && rows <= 64
    }
}
