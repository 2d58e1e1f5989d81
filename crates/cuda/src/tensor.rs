//! Device tensors: f32 activations (with a lazily made bf16 copy that matmuls read), weights in
//! their storage type (bf16 padded to 16 x 16 tiles), norm vectors, bf16 KV pools.

use crate::device::{Arg, Device, grid_for, ptr};
use cudarc::driver::CudaSlice;
use std::cell::OnceCell;
use tf_backend::KvShape;

/// Columns of a bf16 activation row as matmuls read it: `cols` rounded up to 16, zero padded.
pub(crate) fn padded(cols: usize) -> usize {
    cols.div_ceil(16) * 16
}

/// Threads a block of the buffer kernels.
const BLOCK: u32 = 256;

/// A bf16 buffer `[rows, padded(cols)]` whose padding is zero.
pub(crate) fn bf16_out(d: &Device, rows: usize, cols: usize) -> CudaSlice<u16> {
    let kp = padded(cols);
    let y = d.alloc::<u16>(rows * kp);
    if kp != cols {
        let n = rows * kp;
        d.launch(&d.k.fill_zero_u16, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &[Arg::P(ptr(&y, &d.stream)), Arg::Z(n)]);
    }
    y
}

/// The f32 values of a bf16 activation `[rows, cols]` (row stride `padded(cols)`).
fn widen_bf16(d: &Device, x: &CudaSlice<u16>, rows: usize, cols: usize) -> CudaSlice<f32> {
    let y = d.alloc::<f32>(rows * cols);
    let args = [
        Arg::P(ptr(x, &d.stream)),
        Arg::P(ptr(&y, &d.stream)),
        Arg::I(rows as i32),
        Arg::I(cols as i32),
        Arg::I(padded(cols) as i32),
    ];
    d.launch(&d.k.widen_bf16, (grid_for(rows * cols, BLOCK), 1, 1), BLOCK, 0, &args);
    y
}

/// An activation `[rows, cols]`, f32 row-major on the device, or only its bf16 rounding (what a
/// producer whose every consumer is a matmul writes: the gated activations); the other form is
/// made on first use, so at least one is always present.
pub struct CudaAct {
    /// The f32 values; for a bf16-only activation the bf16 values widened, made on first use.
    f32: OnceCell<CudaSlice<f32>>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// The same values rounded to bf16, row stride `padded(cols)`; made by the producing kernel
    /// or on first use, dropped when the activation changes.
    pub(crate) bf16: OnceCell<CudaSlice<u16>>,
}

impl CudaAct {
    pub(crate) fn new(data: CudaSlice<f32>, rows: usize, cols: usize) -> CudaAct {
        CudaAct { f32: OnceCell::from(data), rows, cols, bf16: OnceCell::new() }
    }

    pub(crate) fn with_bf16(data: CudaSlice<f32>, bf16: CudaSlice<u16>, rows: usize, cols: usize) -> CudaAct {
        CudaAct { f32: OnceCell::from(data), rows, cols, bf16: OnceCell::from(bf16) }
    }

    /// An activation held as bf16 only (row stride `padded(cols)`, zero padding).
    pub(crate) fn bf16_only(bf16: CudaSlice<u16>, rows: usize, cols: usize) -> CudaAct {
        CudaAct { f32: OnceCell::new(), rows, cols, bf16: OnceCell::from(bf16) }
    }

    /// The f32 values, widened from the bf16 copy first where only that exists.
    pub(crate) fn data(&self, d: &Device) -> &CudaSlice<f32> {
        self.f32.get_or_init(|| {
            let bf = self.bf16.get().expect("an activation holds f32 or bf16 values");
            widen_bf16(d, bf, self.rows, self.cols)
        })
    }

    /// `Some` when the f32 values exist (not only the bf16 rounding).
    pub(crate) fn f32_ready(&self) -> Option<()> {
        self.f32.get().map(|_| ())
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Marks the bf16 copy stale after an in-place change (of the f32 values, so they must exist).
    pub(crate) fn touched(&mut self) {
        assert!(self.f32.get().is_some(), "an in-place change of a bf16-only activation");
        self.bf16 = OnceCell::new();
    }
}

/// A weight matrix `[rows, cols]` (`y = x @ W^T`).
pub enum CudaMat {
    /// bf16, row-major with rows and columns zero-padded to multiples of 16 (kernels/gemm.cu).
    Bf16 {
        /// `[16 ntiles, 16 kt]` elements.
        w: CudaSlice<u16>,
        /// Output features.
        rows: usize,
        /// Input features.
        cols: usize,
        /// 16-row tiles.
        ntiles: usize,
        /// 16-column tiles.
        kt: usize,
        /// The tensor map the wgmma GEMM reads the rows through (Hopper only).
        map: Option<Box<[u64; 16]>>,
        /// The tensor map of 16-row boxes the TMA GEMV reads the rows through (Hopper only).
        gmap: Option<Box<[u64; 16]>>,
    },
    /// FP8 E4M3 codes with f32 block scales (kernels/fp8.cu): it multiplies as the bf16 weight
    /// of fp8_host.rs, the codes read by the FP8 GEMV or made into that weight in a scratch.
    Fp8 {
        /// Codes `[16 ntiles, 16 kt]`, one byte a weight, zero-padded like `Bf16`'s rows.
        w: CudaSlice<u8>,
        /// One f32 scale a block, `[grid[0], grid[1]]` row-major.
        scales: CudaSlice<f32>,
        /// Block height and width, in weights.
        block: [usize; 2],
        /// Row blocks and column blocks.
        grid: [usize; 2],
        /// Output features.
        rows: usize,
        /// Input features.
        cols: usize,
        /// 16-row tiles.
        ntiles: usize,
        /// 16-column tiles.
        kt: usize,
    },
    /// f16 or f32, row-major as stored (MoE routers, small checkpoints; gemm.cu `gemm_simt_*`).
    Plain {
        /// The elements' bytes.
        w: CudaSlice<u8>,
        /// Whether the elements are f16 (else f32).
        f16: bool,
        /// Output features.
        rows: usize,
        /// Input features.
        cols: usize,
    },
}

impl CudaMat {
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        match *self {
            CudaMat::Bf16 { rows, cols, .. } | CudaMat::Fp8 { rows, cols, .. } | CudaMat::Plain { rows, cols, .. } => {
                (rows, cols)
            }
        }
    }

    /// A padded bf16 weight `[rows, cols]` (`w` holds at least its tiles) with the tensor maps its
    /// matmuls read it through (Hopper).
    pub(crate) fn bf16(d: &Device, w: CudaSlice<u16>, rows: usize, cols: usize) -> CudaMat {
        let (ntiles, kt) = (rows.div_ceil(16), cols.div_ceil(16));
        let wp = ptr(&w, &d.stream);
        let map = (d.wgmma && crate::tma::wgmma_fits(kt))
            .then(|| crate::tma::row_map(wp, ntiles * 16, kt * 16, crate::tma::BOX_ROWS))
            .flatten()
            .map(Box::new);
        let gmap = d
            .wgmma
            .then(|| crate::tma::row_map(wp, ntiles * 16, kt * 16, crate::tma::GEMV_BOX_ROWS))
            .flatten()
            .map(Box::new);
        CudaMat::Bf16 { w, rows, cols, ntiles, kt, map, gmap }
    }
}

/// A weight vector (norm scales), f32.
pub struct CudaVec {
    pub(crate) data: CudaSlice<f32>,
    pub(crate) len: usize,
}

/// One layer's paged KV pool, bf16 `[num_blocks * block_size, num_kv_heads, head_dim]` each.
pub struct CudaKv {
    pub(crate) shape: KvShape,
    pub(crate) k: CudaSlice<u16>,
    /// Values; one unused element in a latent pool (`shape.latent`: its values are its keys).
    pub(crate) v: CudaSlice<u16>,
    /// Tensor maps of K and V for the wgmma prefill attention (Hopper, head width 128, block
    /// sizes `tma::pool_run` takes), else `None`.
    pub(crate) maps: Option<([u64; 16], [u64; 16])>,
}
