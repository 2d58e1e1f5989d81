//! Tensor maps (Hopper's TMA descriptors) for the wgmma GEMM's and the TMA GEMV's operands, W rows
//! and x rows alike: a bf16 `[rows, kp]` matrix read in boxes of 64 k x `box_rows` rows into the
//! 128-byte-swizzled layout, with zeros past the ends (kernels/gemm_wgmma.cu, kernels/gemv_tma.cu).

use cudarc::driver::sys;

/// Rows per box of the wgmma GEMM (kernels/gemm_wgmma.cu `WG_BN`).
pub(crate) const BOX_ROWS: usize = 128;

/// W rows per box of the TMA GEMV (kernels/gemv_tma.cu: one 16-row tile).
pub(crate) const GEMV_BOX_ROWS: usize = 16;

/// The map of `rows` x `kp` bf16 values at device address `x` (row stride `kp`) in boxes of
/// `box_rows` rows, or `None` when the driver refuses it (the caller then takes another kernel).
pub(crate) fn row_map(x: u64, rows: usize, kp: usize, box_rows: usize) -> Option<[u64; 16]> {
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let dims: [sys::cuuint64_t; 2] = [kp as u64, rows as u64];
    let strides: [sys::cuuint64_t; 1] = [kp as u64 * 2];
    let boxes: [sys::cuuint32_t; 2] = [64, box_rows as u32];
    let steps: [sys::cuuint32_t; 2] = [1, 1];
    // SAFETY: every pointer addresses an array of the length the rank (2) implies; `x` is a live
    // device allocation of at least `rows * kp` bf16 values, which the map only describes.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            x as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(map.opaque)
}

/// The map of a KV pool (kernels/attention_wg.cu): `slots` x `heads` x 128 bf16 values at device
/// address `x`, in boxes of 64 values x 1 head x `run` slots, zeros past the last slot; `None`
/// when the driver refuses it (attention then takes the mma.sync kernel).
pub(crate) fn pool_map(x: u64, slots: usize, heads: usize, run: usize) -> Option<[u64; 16]> {
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let dims: [sys::cuuint64_t; 3] = [128, heads as u64, slots as u64];
    let strides: [sys::cuuint64_t; 2] = [256, heads as u64 * 256];
    let boxes: [sys::cuuint32_t; 3] = [64, 1, run as u32];
    let steps: [sys::cuuint32_t; 3] = [1, 1, 1];
    // SAFETY: every pointer addresses an array of the length the rank (3) implies; `x` is a live
    // device allocation of `slots * heads * 128` bf16 values, which the map only describes.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            3,
            x as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(map.opaque)
}

/// Slots per box of a pool map for `block_size`-slot blocks: runs of contiguous slots that tile a
/// 64-key block in whole 1 KB swizzle atoms, or `None` (the block size does not allow it).
pub(crate) fn pool_run(block_size: usize) -> Option<usize> {
    let ok = block_size.is_multiple_of(8) && (64 % block_size == 0 || block_size.is_multiple_of(64));
    ok.then_some(block_size.min(64))
}

/// Whether the wgmma GEMM takes a weight of `kt` 16-wide k tiles: K must be whole 64-wide k
/// blocks and its segments (kernels/gemm.cu `gemm_seg_len`) must end on them, or be one segment.
pub(crate) fn wgmma_fits(kt: usize) -> bool {
    let nseg = (kt / 32).clamp(1, 8);
    let len = (kt.div_ceil(nseg) + 1) & !1;
    kt.is_multiple_of(4) && (len.is_multiple_of(4) || len >= kt)
}

/// K segments of a weight of `kt` k tiles (kernels/gemm.cu `gemm_seg_len`).
pub(crate) fn segments(kt: usize) -> usize {
    let nseg = (kt / 32).clamp(1, 8);
    let len = (kt.div_ceil(nseg) + 1) & !1;
    kt.div_ceil(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_of_common_widths_fit_the_wgmma_blocks() {
        // 1024, 3072, 4096, 12288 and 14336 columns: the widths of Qwen3 and Llama checkpoints.
        for kt in [64, 192, 256, 768, 896] {
            assert!(wgmma_fits(kt), "kt={kt}");
        }
        // 1040 columns: two segments of 34 k tiles end inside a 64-wide block.
        assert!(!wgmma_fits(65));
        // A single segment of whole blocks fits (it ends at K); a partial last block does not.
        assert!(wgmma_fits(4) && wgmma_fits(28));
        assert!(!wgmma_fits(13) && !wgmma_fits(63));
    }

    #[test]
    fn pool_runs_tile_whole_key_blocks() {
        assert_eq!([pool_run(8), pool_run(16), pool_run(64), pool_run(128)], [Some(8), Some(16), Some(64), Some(64)]);
        // Runs of 4 slots are half a swizzle atom; 24 and 96 do not tile 64 keys.
        for bs in [1, 4, 24, 96, 100] {
            assert_eq!(pool_run(bs), None, "block size {bs}");
        }
    }

    #[test]
    fn segment_counts_follow_the_kernels_lengths() {
        // 4096 columns: 8 segments of 32 tiles; 12288: 8 of 96; 1024: 2 of 32; 80: one of 6.
        assert_eq!([segments(256), segments(768), segments(64), segments(5)], [8, 8, 2, 1]);
        // 1040 columns: 65 tiles in 2 segments of 34 (the second shorter).
        assert_eq!(segments(65), 2);
    }
}
