//! Launch sizes shared by the device set-up and the launchers: each kernel's dynamic shared
//! memory (mirroring the constants of kernels/*.cu), its threads, and the per-block limit.

/// The largest dynamic shared memory a launch may ask for (what device.rs allows the kernels:
/// Hopper's 227 KB a block less 1 KB of static memory).
pub(crate) const MAX_SMEM: u32 = 227 * 1024 - 1024;

/// Shared memory of the tiled GEMM (kernels/gemm.cu `GM_SMEM`: 6 stages of 128 W rows and 128 x
/// rows of 40 values).
pub(crate) const GEMM_SMEM: u32 = 6 * (128 + 128) * 40 * 2;
const _: () = assert!(GEMM_SMEM <= 227 * 1024, "the GEMM's shared memory exceeds Hopper's per-block limit");

/// Shared memory of the wgmma GEMM (kernels/gemm_wgmma.cu `WG_SMEM`: 6 stages of 16 KB of x and
/// 16 KB of W, plus 1 KB to align the ring) and its static 1 KB.
pub(crate) const WGMMA_SMEM: u32 = 6 * (128 * 64 * 2 + 128 * 64 * 2) + 1024;
const _: () = assert!(WGMMA_SMEM + 1024 <= 227 * 1024, "the wgmma GEMM's shared memory exceeds the limit");

/// Shared memory of the wgmma prefill attention (kernels/attention_wg.cu `AW_SMEM`: Q rows of two
/// warpgroups, three stages of a 64-key block's K and V, the folded chunks, 1 KB to align them).
pub(crate) const ATTENTION_WG_SMEM: u32 = 2 * 2 * 64 * 128 + 3 * 2 * 2 * 64 * 128 + 2 * 64 * 128 * 4 + 1024;
const _: () = assert!(ATTENTION_WG_SMEM + 1024 <= 227 * 1024, "wgmma attention's shared memory exceeds the limit");

/// Threads of a wgmma GEMM block: two consumer warpgroups and a producer warpgroup.
pub(crate) const WGMMA_THREADS: u32 = 384;

/// Dynamic shared memory of the attention kernel for head width `d` (two stages of K and V).
pub(crate) fn attention_smem(d: usize) -> u32 {
    (2 * 2 * 64 * (d + 8) * 2) as u32
}

/// Dynamic shared memory of the warp-split decode attention kernel (kernels/attention_split.cu):
/// four stages of K and V, then each block's P fragments, maxima and row sums.
pub(crate) fn attention_split_smem(d: usize) -> u32 {
    (4 * 2 * 64 * (d + 8) * 2 + 4 * 32 * 16 * 4 + 2 * 4 * 16 * 4) as u32
}

/// Keys a block of the latent attention kernel walks at once (kernels/attention_mla.cu `ML_KB`).
pub(crate) const MLA_KEYS: usize = 32;
/// Most query heads a latent attention CTA takes (kernels/attention_mla.cu `ML_HT`).
pub(crate) const MLA_HEADS: usize = 16;
/// Threads of a latent attention CTA (kernels/attention_mla.cu `ML_THREADS`).
pub(crate) const MLA_THREADS: u32 = 256;
/// The dynamic shared memory device.rs allows the latent attention kernel (A100's 163 KB a block
/// holds it too).
pub(crate) const MLA_SMEM: u32 = 128 * 1024;

/// Dynamic shared memory of the latent attention kernel for `ht` heads of width `d`
/// (kernels/attention_mla.cu `MlSmem`): queries and chunk outputs in f32, probabilities, the
/// per-head state, one block of keys in bf16 rows of `d + 2` and their pool slots.
pub(crate) fn attention_mla_smem(d: usize, ht: usize) -> u32 {
    ((2 * ht * d + ht * MLA_KEYS + 5 * MLA_HEADS + MLA_KEYS) * 4 + MLA_KEYS * (d + 2) * 2) as u32
}

/// Warps per GEMV block (kernels/gemm.cu `GEMV_W`), one per K segment.
pub(crate) const GEMV_WARPS: usize = 8;

/// Ring stages of the one-row TMA GEMV (kernels/gemv_tma.cu `GT_XR_ST`).
const GEMV_XR_STAGES: usize = 11;

/// Shared memory of the one-row TMA GEMV for an x row of `kp` values: 1 KB of alignment, the W
/// rings, two sets of one row group's segment sums, the ring barriers and one a warp for its
/// segment of the row, the row.
pub(crate) fn gemv_tma_xr_smem(kp: usize) -> u32 {
    let bars = GEMV_WARPS * (GEMV_XR_STAGES + 1) * 8;
    (1024 + GEMV_WARPS * GEMV_XR_STAGES * 2048 + 2 * GEMV_WARPS * 4 * 32 * 4 + bars + 2 * kp) as u32
}

/// Shared memory of the TMA GEMV for `nt` row groups (kernels/gemv_tma.cu `GtCfg<NT>::SMEM`):
/// 1 KB of alignment, `GT_W` rings of `ST` stages of a 2 KB W box and an `nt` KB x box, two sets
/// of segment sums, the barriers.
pub(crate) fn gemv_tma_smem(nt: usize) -> u32 {
    let st = match nt {
        1 => 8,
        2 => 6,
        _ => 4,
    };
    (1024 + GEMV_WARPS * st * (2048 + 1024 * nt) + 2 * GEMV_WARPS * nt * 4 * 32 * 4 + GEMV_WARPS * st * 8) as u32
}

/// Shared memory of the few-row GEMV for `nt` row groups: `GEMV_W` warps' rings of `ST` stages of
/// 16 W rows and `8 * NT` x rows of `U * 32 + 16` bytes each, then the segment sums
/// (kernels/gemm.cu `GEMV_KERNEL(NT, U, ST)`).
pub(crate) fn gemv_smem(nt: usize) -> u32 {
    let (u, st) = match nt {
        1 | 2 => (4, 4),
        4 => (4, 3),
        _ => (2, 3),
    };
    let xr = 8 * nt;
    (GEMV_WARPS * st * (16 + xr) * (u * 32 + 16) + GEMV_WARPS * nt * 4 * 32 * 4) as u32
}

/// k tiles a stage and ring stages of the FP8 GEMV for `nt` row groups (kernels/gemv_fp8.cu
/// `GEMV_FP8_KERNEL(NT, U, ST)`: gemv_smem's).
pub(crate) fn gemv_fp8_stages(nt: usize) -> (usize, usize) {
    match nt {
        1 | 2 => (4, 4),
        4 => (4, 3),
        _ => (2, 3),
    }
}

/// Shared memory of the FP8 GEMV for `nt` row groups: `GEMV_W` warps' rings of `ST` stages of 16
/// rows of `U * 16 + 16` code bytes and `8 * NT` x rows of `U * 32 + 16` bytes, then the segment
/// sums.
pub(crate) fn gemv_fp8_smem(nt: usize) -> u32 {
    let (u, st) = gemv_fp8_stages(nt);
    (GEMV_WARPS * st * (16 * (u * 16 + 16) + 8 * nt * (u * 32 + 16)) + GEMV_WARPS * nt * 4 * 32 * 4) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hopper's largest dynamic shared memory per block.
    const LIMIT: u32 = 227 * 1024;

    #[test]
    fn gemvs_fit_in_shared_memory() {
        for nt in [1, 2, 4, 8] {
            assert!(gemv_smem(nt) <= LIMIT, "GEMV for {nt} row groups: {} bytes", gemv_smem(nt));
            assert!(gemv_fp8_smem(nt) <= LIMIT, "FP8 GEMV for {nt} row groups: {} bytes", gemv_fp8_smem(nt));
        }
        for nt in [1, 2, 4] {
            assert!(gemv_tma_smem(nt) <= LIMIT, "TMA GEMV for {nt} row groups: {} bytes", gemv_tma_smem(nt));
        }
        // qwen3-8b's widest x row (down_proj, 12288) and qwen3-32b's (25600, the few-row kernel).
        assert!(gemv_tma_xr_smem(12288) <= MAX_SMEM);
        assert!(gemv_tma_xr_smem(25600) > MAX_SMEM);
        assert_eq!(gemv_tma_xr_smem(20608), MAX_SMEM, "the widest row that fits");
    }

    #[test]
    fn attention_kernels_fit_in_shared_memory() {
        for d in [16, 32, 64, 128, 256] {
            assert!(attention_smem(d) + 512 <= LIMIT, "attention d={d}");
        }
        for d in [64, 128] {
            assert!(attention_split_smem(d) + 1024 <= LIMIT, "split attention d={d}");
        }
        // DeepSeek V3 / GLM-5's latent row (512 + 64) takes a whole head tile; A100 holds it too.
        assert!(attention_mla_smem(576, MLA_HEADS) <= MLA_SMEM && MLA_SMEM + 1024 <= 163 * 1024);
        assert_eq!(attention_mla_smem(48, 4), (2 * 4 * 48 + 4 * 32 + 80 + 32) * 4 + 32 * 50 * 2);
    }
}
