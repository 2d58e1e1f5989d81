//! What every kernel launcher works on: the device, the host data uploaded once and reused, the
//! inputs of a graph capture in progress, and the kernel choices fixed at start. The launchers
//! (ops.rs, matmul.rs, attention.rs, ...) take a `Ctx`, never the backend, so they sit below it.

use crate::attn_meta::{Layout, MetaUpload, Packed};
use crate::capture::Active;
use crate::device::{Device, ptr};
use crate::options::{CudaOptions, FP8_GEMV_ROWS, GLU_STORE_MIN_ROWS, SplitRule};
use cudarc::driver::CudaSlice;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Host data uploaded once and reused while it is unchanged (positions and attention metadata
/// are the same for every layer of a round).
#[derive(Default)]
pub(crate) struct Caches {
    pub(crate) positions: Option<(Vec<u32>, CudaSlice<u32>)>,
    /// Rope frequency tables, by their values. Recordings hold their addresses: kept for good.
    pub(crate) ropes: Vec<(Vec<f32>, Table<CudaSlice<f32>>)>,
    /// The attention metadata of the latest packings (attention.rs: one per query-head group).
    pub(crate) attn: Vec<MetaUpload>,
    /// MoE layers' expert weight addresses on the device, by their host copy (moe.rs).
    /// Recordings hold their addresses likewise.
    pub(crate) experts: HashMap<Vec<u64>, Table<Arc<CudaSlice<u64>>>>,
}

/// A cached upload that recordings may read (graph.rs), and whether it was made while a capture
/// was open (its copy then went into that capture, which an upload drops, so it never ran).
pub(crate) struct Table<V> {
    pub(crate) dev: V,
    pub(crate) in_capture: bool,
}

/// Metadata uploads kept: one per distinct packing a round's layers ask for (a packing depends on
/// the layer's query heads a KV head, and latent attention packs by every query head), for this
/// round and the one before.
const KEEP_META: usize = 4;

impl Caches {
    /// The device address and layout of `packed`'s upload: the cached one where a packing equal
    /// to it was uploaded, else a new upload (the oldest of [`KEEP_META`] goes).
    pub(crate) fn meta(&mut self, dev: &Device, packed: Packed) -> (u64, Layout) {
        let i = match self.attn.iter().position(|m| m.packed == packed) {
            Some(i) => i,
            None => {
                if self.attn.len() >= KEEP_META {
                    self.attn.remove(0);
                }
                let up = dev.upload(&packed.host);
                self.attn.push(MetaUpload { packed, dev: up });
                self.attn.len() - 1
            }
        };
        (ptr(&self.attn[i].dev, &dev.stream), self.attn[i].packed.lay)
    }
}

/// The kernel launchers' context.
pub(crate) struct Ctx {
    pub(crate) dev: Device,
    caches: Mutex<Caches>,
    /// The inputs of a round being captured into a graph (graph.rs), which ops read instead of
    /// uploading their own.
    pub(crate) capture: Active,
    /// Prefill attention stays on the mma.sync kernel on Hopper (`CudaOptions`).
    pub(crate) mma_sync_attention: bool,
    /// When the wgmma GEMM splits K (`CudaOptions::gemm_split`).
    pub(crate) split: SplitRule,
    /// Rows from which gate/up's wgmma GEMM applies the activation in its store.
    pub(crate) glu_store_rows: usize,
    /// The bf16 weight of an FP8 weight that a matmul dequantizes (fp8.rs), sized at load to the
    /// largest FP8 weight and reused by every such matmul.
    pub(crate) fp8_scratch: Mutex<Option<CudaSlice<u16>>>,
    /// Most rows an FP8 matmul takes the FP8 GEMV for (`CudaOptions::fp8_gemv_rows`).
    pub(crate) fp8_gemv_rows: usize,
    /// Many-row MoE rounds run through the grouped GEMM (unless `CudaOptions::moe_per_expert`).
    pub(crate) moe_grouped: bool,
}

impl Ctx {
    /// A context on `dev` with the kernel choices of `opts`.
    pub(crate) fn new(dev: Device, opts: &CudaOptions) -> Ctx {
        Ctx {
            dev,
            caches: Mutex::default(),
            capture: Active::default(),
            mma_sync_attention: opts.mma_sync_attention,
            split: opts.gemm_split.unwrap_or(SplitRule::DEFAULT),
            glu_store_rows: opts.glu_store_rows.map_or(GLU_STORE_MIN_ROWS, |r| r.max(33)),
            moe_grouped: !opts.moe_per_expert,
            fp8_scratch: Mutex::default(),
            fp8_gemv_rows: opts.fp8_gemv_rows.unwrap_or(FP8_GEMV_ROWS),
        }
    }

    /// The upload caches.
    pub(crate) fn caches(&self) -> MutexGuard<'_, Caches> {
        self.caches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After a dropped capture, forgets what it uploaded (copies that never ran) and the
    /// per-round uploads (positions, metadata), which no recording reads. The rope and expert
    /// tables uploaded before stay: recordings of other shapes and models launch with their
    /// addresses, and freeing them let the next upload take one (a drafter's table under the
    /// target's recording).
    pub(crate) fn forget_captured(&self) {
        let mut c = self.caches();
        c.positions = None;
        c.attn.clear();
        c.ropes.retain(|(_, t)| !t.in_capture);
        c.experts.retain(|_, t| !t.in_capture);
    }
}
