//! Launching the element-wise, row-wise and matmul kernels.

use crate::capture::Input;
use crate::ctx::{Ctx, Table};
use crate::device::{Arg, grid_for, ptr};
use crate::error::must;
use crate::tensor::{CudaAct, CudaKv, CudaMat, CudaVec, bf16_out, padded};
use cudarc::driver::CudaSlice;
use tf_backend::{Activation, BackendError, KvShape, QkNorm, Rope};
use tf_core::DType;
use tf_formats::TensorView;

const BLOCK: u32 = 256;

/// Takes a 2-D float weight: bf16 is zero-padded to 16 x 16 tiles on the device, f16 and f32 kept
/// as stored.
pub(crate) fn mat(b: &Ctx, t: &TensorView) -> Result<CudaMat, BackendError> {
    let [rows, cols] = t.shape[..] else {
        return Err(BackendError::Unsupported(format!("{}: expected a 2-D weight, found {:?}", t.name, t.shape)));
    };
    let d = &b.dev;
    // MXFP4 (gpt-oss's experts) decoded to bf16 at load: an E2M1 code times its power-of-two
    // scale has at most two significant bits, so its f32 value is a bf16 value and the matmuls
    // see the weights the CPU's MXFP4 path decodes.
    let (raw, dtype) = match t.dtype {
        DType::Mxfp4 => {
            let bf16: Vec<u8> = t.to_f32().into_iter().flat_map(|v| half::bf16::from_f32(v).to_le_bytes()).collect();
            (d.upload(&bf16), DType::BF16)
        }
        other => (d.upload(t.data.as_bytes()), other),
    };
    match dtype {
        DType::BF16 => {
            let (ntiles, kt) = (rows.div_ceil(16), cols.div_ceil(16));
            let w = d.alloc::<u16>(ntiles * kt * 256);
            let total = ntiles * kt * 256;
            let args = [
                Arg::P(ptr(&raw, &d.stream)),
                Arg::P(ptr(&w, &d.stream)),
                Arg::I(rows as i32),
                Arg::I(cols as i32),
                Arg::I(ntiles as i32),
                Arg::I(kt as i32),
            ];
            d.launch(&d.k.pad_bf16, (grid_for(total, BLOCK), 1, 1), BLOCK, 0, &args);
            Ok(bf16_mat(b, w, rows, cols))
        }
        DType::F16 => Ok(CudaMat::Plain { w: raw, f16: true, rows, cols }),
        DType::F32 => Ok(CudaMat::Plain { w: raw, f16: false, rows, cols }),
        other => Err(BackendError::Unsupported(format!("{}: dtype {other} is not supported on CUDA", t.name))),
    }
}

/// A weight as f32 (`CudaMat::Plain`: the f32 GEMM, one fixed order per output over f32
/// activations), whatever its stored type: an MoE router, whose choices must not turn on bf16
/// rounding.
pub(crate) fn mat_f32(b: &Ctx, t: &TensorView) -> Result<CudaMat, BackendError> {
    let [rows, cols] = t.shape[..] else {
        return Err(BackendError::Unsupported(format!("{}: expected a 2-D weight, found {:?}", t.name, t.shape)));
    };
    let values = t.to_f32();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(CudaMat::Plain { w: b.dev.upload(&bytes), f16: false, rows, cols })
}

/// A padded bf16 weight `[rows, cols]` with the tensor maps its matmuls read it through (Hopper).
fn bf16_mat(b: &Ctx, w: CudaSlice<u16>, rows: usize, cols: usize) -> CudaMat {
    CudaMat::bf16(&b.dev, w, rows, cols)
}

/// A bf16 gate and up weight (`[inter, cols]` each) packed into one `[2 inter, cols]` weight
/// (tf_backend `gate_up` row order), so one matmul makes both and the wgmma GEMM can apply the
/// activation in its store; `None` (kept apart) for other dtypes or `inter` not whole groups.
pub(crate) fn mat_gate_up(b: &Ctx, gate: &TensorView, up: &TensorView) -> Result<Option<CudaMat>, BackendError> {
    let [inter, cols] = gate.shape[..] else {
        return Ok(None);
    };
    if gate.shape != up.shape {
        return Ok(None);
    }
    if gate.dtype != DType::BF16 || up.dtype != DType::BF16 || !tf_backend::gate_up::packable(inter) {
        return Ok(None);
    }
    let d = &b.dev;
    let (g, u) = (d.upload(gate.data.as_bytes()), d.upload(up.data.as_bytes()));
    let (rows, kt) = (2 * inter, cols.div_ceil(16));
    let total = rows * kt * 16;
    let w = d.alloc::<u16>(total);
    let args = [
        Arg::P(ptr(&g, &d.stream)),
        Arg::P(ptr(&u, &d.stream)),
        Arg::P(ptr(&w, &d.stream)),
        Arg::I(inter as i32),
        Arg::I(cols as i32),
        Arg::I(kt as i32),
    ];
    d.launch(&d.k.pack_gate_up_bf16, (grid_for(total, BLOCK), 1, 1), BLOCK, 0, &args);
    Ok(Some(bf16_mat(b, w, rows, cols)))
}

/// One layer's zeroed bf16 KV pool: `shape.num_blocks` blocks and one more past them, the
/// scratch block graph_pad.rs's pad rows write and read (no sequence's table names it). A latent
/// pool (MLA) keeps K alone (attention_mla.rs reads its values from its keys).
pub(crate) fn kv(b: &Ctx, shape: KvShape) -> Result<CudaKv, BackendError> {
    if shape.latent && !crate::smem::latent_width_fits(shape.head_dim) {
        return Err(BackendError::Unsupported(format!(
            "a latent KV pool (MLA) of width {} has no CUDA attention kernel (an even width whose keys fit \
             the kernel's shared memory): run this model with --device cpu",
            shape.head_dim
        )));
    }
    if !shape.latent && !crate::smem::HEAD_DIMS.contains(&shape.head_dim) {
        return Err(BackendError::Unsupported(format!(
            "a KV pool of head width {} has no CUDA attention kernel (widths {:?}; Gemma 4's full layers of \
             global_head_dim 512 among others): run this model with --device cpu",
            shape.head_dim,
            crate::smem::HEAD_DIMS
        )));
    }
    let n = (shape.num_blocks + 1)
        .checked_mul(shape.block_size)
        .and_then(|n| n.checked_mul(shape.num_kv_heads * shape.head_dim))
        .ok_or_else(|| BackendError::Unsupported(format!("KV pool {shape:?} is too large")))?;
    let (k, v): (CudaSlice<u16>, CudaSlice<u16>) = (b.dev.zeros(n), b.dev.zeros(if shape.latent { 1 } else { n }));
    let slots = (shape.num_blocks + 1) * shape.block_size;
    let maps = crate::tma::pool_run(shape.block_size)
        .filter(|_| b.dev.wgmma && shape.head_dim == 128 && !shape.latent && slots <= i32::MAX as usize)
        .and_then(|run| {
            let map = |p: &CudaSlice<u16>| crate::tma::pool_map(ptr(p, &b.dev.stream), slots, shape.num_kv_heads, run);
            Some((map(&k)?, map(&v)?))
        });
    Ok(CudaKv { shape, k, v, maps })
}

/// The activation's bf16 copy, made now if no kernel left one.
pub(crate) fn bf16_of<'a>(b: &Ctx, x: &'a CudaAct) -> &'a CudaSlice<u16> {
    x.bf16.get_or_init(|| {
        let d = &b.dev;
        let kp = padded(x.cols);
        let y = d.alloc::<u16>(x.rows * kp);
        let n = x.rows * kp;
        let args = [
            Arg::P(ptr(x.data(&b.dev), &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::I(x.rows as i32),
            Arg::I(x.cols as i32),
            Arg::I(kp as i32),
        ];
        d.launch(&d.k.to_bf16, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
        y
    })
}

pub(crate) fn embed(b: &Ctx, table: &CudaMat, ids: &[u32], scale: f32) -> CudaAct {
    match b.capture.input(Input::Ids, ids) {
        Some(p) => embed_at(b, table, p, ids.len(), scale),
        None => {
            let idb = b.dev.upload(ids);
            embed_at(b, table, ptr(&idb, &b.dev.stream), ids.len(), scale)
        }
    }
}

/// [`embed`] of the `n` ids at device address `idp`.
pub(crate) fn embed_at(b: &Ctx, table: &CudaMat, idp: u64, n: usize, scale: f32) -> CudaAct {
    let d = &b.dev;
    let (_, cols) = table.shape();
    let out = d.alloc::<f32>(n * cols);
    let (w, dtype, kt) = match table {
        CudaMat::Bf16 { w, kt, .. } => (ptr(w, &d.stream), 0, *kt),
        CudaMat::Plain { w, f16, .. } => (ptr(w, &d.stream), if *f16 { 1 } else { 2 }, 0),
        CudaMat::Fp8 { .. } => {
            embed_fp8(b, table, idp, n, scale, &out);
            return CudaAct::new(out, n, cols);
        }
    };
    if n > 0 {
        let args = [
            Arg::P(w),
            Arg::I(dtype),
            Arg::I(kt as i32),
            Arg::P(idp),
            Arg::I(cols as i32),
            Arg::F(scale),
            Arg::P(ptr(&out, &d.stream)),
        ];
        d.launch(&d.k.embed, (n as u32, 1, 1), BLOCK, 0, &args);
    }
    CudaAct::new(out, n, cols)
}

/// [`embed_at`] of an FP8 table: f32 `code * block scale * scale`, the host backends' values.
fn embed_fp8(b: &Ctx, table: &CudaMat, idp: u64, n: usize, scale: f32, out: &CudaSlice<f32>) {
    let CudaMat::Fp8 { w, scales, block, grid, cols, kt, .. } = table else { return };
    let d = &b.dev;
    if n > 0 {
        let args = [
            Arg::P(ptr(w, &d.stream)),
            Arg::P(ptr(scales, &d.stream)),
            Arg::I(*kt as i32),
            Arg::I(block[0] as i32),
            Arg::I(block[1] as i32),
            Arg::I(grid[0] as i32),
            Arg::I(grid[1] as i32),
            Arg::P(idp),
            Arg::I(*cols as i32),
            Arg::F(scale),
            Arg::P(ptr(out, &d.stream)),
        ];
        d.launch(&d.k.embed_fp8, (n as u32, 1, 1), BLOCK, 0, &args);
    }
}

pub(crate) fn rms_norm(b: &Ctx, x: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
    norm_launch(b, x, None, w, eps, one_plus, true)
}

/// [`rms_norm`] of rows that only bf16 matmuls read: many rows (prefill) write only the bf16 copy
/// (the same bits as the copy `rms_norm` makes; the f32 values are widened on first use).
pub(crate) fn rms_norm_for_matmul(b: &Ctx, x: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
    norm_launch(b, x, None, w, eps, one_plus, false)
}

/// `x += y`, then RMSNorm of the rows of `x`, in one kernel.
pub(crate) fn add_rms_norm(b: &Ctx, x: &mut CudaAct, y: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
    assert_eq!((x.rows, x.cols), (y.rows, y.cols), "add_rms_norm: shapes differ");
    assert_eq!(w.len, x.cols, "add_rms_norm: the norm spans whole rows");
    let out = norm_launch(b, x, Some(y), w, eps, one_plus, true);
    x.touched();
    out
}

/// RMSNorm over groups of `w.len` values of `x`, after adding `add` into `x` when given; without
/// `f32`, rows in quarter-size blocks (prefill) get only their bf16 copy.
fn norm_launch(
    b: &Ctx,
    x: &CudaAct,
    add: Option<&CudaAct>,
    w: &CudaVec,
    eps: f32,
    one_plus: bool,
    f32: bool,
) -> CudaAct {
    let d = &b.dev;
    let group = w.len;
    assert!(group > 0 && x.cols.is_multiple_of(group), "rms_norm: rows of {} values in groups of {group}", x.cols);
    let groups = x.len() / group;
    // The order is that of `norm_threads(group)` threads; more than 64 groups (prefill) run it
    // on blocks a quarter that size, four to an SM (kernels/ops.cu `rms_norm_body`).
    let virt = norm_threads(group);
    let q4 = groups > 64 && virt.is_multiple_of(128) && group <= 4 * virt;
    let bf16_only = !f32 && q4 && add.is_none();
    let y = d.alloc::<f32>(if bf16_only { 1 } else { x.len() });
    let yb = bf16_out(&b.dev, x.rows, x.cols);
    if groups > 0 {
        let block = if q4 { virt / 4 } else { virt } as u32;
        let mut args = vec![Arg::P(ptr(x.data(&b.dev), &d.stream))];
        if let Some(a) = add {
            args.push(Arg::P(ptr(a.data(&b.dev), &d.stream)));
        }
        args.extend([
            Arg::P(ptr(&w.data, &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::P(ptr(&yb, &d.stream)),
            Arg::I(x.cols as i32),
            Arg::I(group as i32),
            Arg::I(padded(x.cols) as i32),
            Arg::F(eps),
            Arg::I(one_plus as i32),
        ]);
        // Up to four values a thread, the rows the TMA GEMV takes next (at most 32) run the `_j4`
        // kernels (four values a thread in registers), whose blocks fit beside a GEMV block. Before
        // the wgmma GEMM (33-64 rows) the old kernels stay: batch-64 decode read 0.991 with them
        // (H200, sweep-885d03b).
        let short = groups <= 32 && group <= 4 * virt;
        let f = match (add.is_some(), q4) {
            _ if bf16_only => &d.k.rms_norm_q4_bf16,
            (true, true) => &d.k.add_rms_norm_q4,
            (true, false) if short => &d.k.add_rms_norm_j4,
            (true, false) => &d.k.add_rms_norm,
            (false, true) => &d.k.rms_norm_q4,
            (false, false) if short => &d.k.rms_norm_j4,
            (false, false) => &d.k.rms_norm,
        };
        d.launch(f, (groups as u32, 1, 1), block, d.small_smem(f, x.rows), &args);
    }
    if bf16_only {
        return CudaAct::bf16_only(yb, x.rows, x.cols);
    }
    CudaAct::with_bf16(y, yb, x.rows, x.cols)
}

/// Threads of the RMSNorm's sum order for a group of `group` values (about four values a thread,
/// at most kernels/ops.cu `RMS_J` = 16); `qk_norm_rope` replays it. (Decode runs it on that many
/// threads: quarter-size blocks for few rows cost batch-8 decode 7% on the H200, sharing SMs
/// with the TMA GEMV and launching early.)
pub(crate) fn norm_threads(group: usize) -> usize {
    (group.div_ceil(4).div_ceil(32) * 32).clamp(32, 1024)
}

pub(crate) fn add_assign(b: &Ctx, x: &mut CudaAct, y: &CudaAct) {
    assert_eq!((x.rows, x.cols), (y.rows, y.cols), "add_assign: shapes differ");
    let d = &b.dev;
    let n = x.len();
    let args = [Arg::P(ptr(x.data(&b.dev), &d.stream)), Arg::P(ptr(y.data(&b.dev), &d.stream)), Arg::Z(n)];
    d.launch(&d.k.add_inplace, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    x.touched();
}

/// The device copy of `data` in `slot`, uploaded again only when it changed.
fn cached_u32<'a>(b: &Ctx, slot: &'a mut Option<(Vec<u32>, CudaSlice<u32>)>, data: &[u32]) -> &'a CudaSlice<u32> {
    // Inside a capture the cached copy holds this round's values on every replay.
    b.dev.spoil_capture();
    if slot.as_ref().is_none_or(|(h, _)| h.as_slice() != data) {
        *slot = Some((data.to_vec(), b.dev.upload(data)));
    }
    &slot.as_ref().expect("just filled").1
}

pub(crate) fn rope(b: &Ctx, x: &mut CudaAct, positions: &[u32], head_dim: usize, rope: &Rope) {
    assert_eq!(positions.len(), x.rows, "rope: one position per row");
    assert!(head_dim > 0 && x.cols.is_multiple_of(head_dim), "rope: {} columns in heads of {head_dim}", x.cols);
    let half = rope.inv_freq.len();
    assert!(2 * half <= head_dim, "rope: rotary width exceeds head_dim");
    if half == 0 || x.rows == 0 {
        return;
    }
    let d = &b.dev;
    let mut c = b.caches();
    let caches = &mut *c;
    let pos = b.capture.input(Input::Positions, positions);
    let pos = pos.unwrap_or_else(|| ptr(cached_u32(b, &mut caches.positions, positions), &d.stream));
    let table = rope_table(b, &mut caches.ropes, rope);
    let total = x.rows * (x.cols / head_dim) * half;
    let args = [
        Arg::P(ptr(x.data(&b.dev), &d.stream)),
        Arg::P(pos),
        Arg::P(table),
        Arg::I(x.rows as i32),
        Arg::I(x.cols as i32),
        Arg::I(head_dim as i32),
        Arg::I(half as i32),
        Arg::F(rope.attention_scaling),
    ];
    d.launch(&d.k.rope, (grid_for(total, BLOCK), 1, 1), BLOCK, 0, &args);
    drop(c);
    x.touched();
}

/// Per-head norms (when given) and RoPE of `q` and `k` in place, one kernel for both.
pub(crate) fn qk_norm_rope(
    b: &Ctx,
    q: &mut CudaAct,
    k: &mut CudaAct,
    norms: Option<QkNorm<'_, CudaVec>>,
    positions: &[u32],
    head_dim: usize,
    rope: &Rope,
) {
    let half = rope.inv_freq.len();
    let fits =
        head_dim <= 256 && 2 * half <= head_dim && norms.is_none_or(|n| n.q.len == head_dim && n.k.len == head_dim);
    if !fits || q.rows != k.rows || q.rows == 0 || half == 0 {
        // Shapes the fused kernel does not take: the separate ops, same values.
        if let Some(n) = norms {
            *q = rms_norm(b, q, n.q, n.eps, n.one_plus);
            *k = rms_norm(b, k, n.k, n.eps, n.one_plus);
        }
        self::rope(b, q, positions, head_dim, rope);
        self::rope(b, k, positions, head_dim, rope);
        return;
    }
    assert_eq!(positions.len(), q.rows, "qk_norm_rope: one position per row");
    assert!(q.cols.is_multiple_of(head_dim) && k.cols.is_multiple_of(head_dim), "qk_norm_rope: whole heads");
    let d = &b.dev;
    let mut c = b.caches();
    let caches = &mut *c;
    let pos = b.capture.input(Input::Positions, positions);
    let pos = pos.unwrap_or_else(|| ptr(cached_u32(b, &mut caches.positions, positions), &d.stream));
    let table = rope_table(b, &mut caches.ropes, rope);
    let (nq, nk) = (q.cols / head_dim, k.cols / head_dim);
    let (qn, kn, eps, one_plus) = match norms {
        Some(n) => (ptr(&n.q.data, &d.stream), ptr(&n.k.data, &d.stream), n.eps, n.one_plus),
        None => (0, 0, 0.0, false),
    };
    let nthr = norm_threads(head_dim);
    let hpw = qk_heads_per_warp(q.rows, nq + nk, d.num_sms);
    let args = [
        Arg::P(ptr(q.data(&b.dev), &d.stream)),
        Arg::P(ptr(k.data(&b.dev), &d.stream)),
        Arg::P(qn),
        Arg::P(kn),
        Arg::P(pos),
        Arg::P(table),
        Arg::I(nq as i32),
        Arg::I(nk as i32),
        Arg::I(head_dim as i32),
        Arg::I(half as i32),
        Arg::F(rope.attention_scaling),
        Arg::F(eps),
        Arg::I(one_plus as i32),
        Arg::I(nthr as i32),
        Arg::I(hpw as i32),
    ];
    let smem = d.small_smem(&d.k.qk_norm_rope, q.rows);
    d.launch(&d.k.qk_norm_rope, (q.rows as u32, (nq + nk).div_ceil(4 * hpw) as u32, 1), 128, smem, &args);
    drop(c);
    q.touched();
    k.touched();
}

/// Heads each warp of qk_norm_rope takes in turn for `rows` rows of `heads` q and k heads on
/// `sms` SMs: as many as leave about 64 warps an SM to run (every warp makes its row's rotations
/// once, which dominated the prefill kernel when each head made them; a 128-token prefill with all
/// of a row's heads in one block ran 5% slower, its warps too few), one at decode. Only
/// scheduling: the same bits either way.
fn qk_heads_per_warp(rows: usize, heads: usize, sms: usize) -> usize {
    (rows * heads / (64 * sms).max(1)).clamp(1, heads.div_ceil(4).max(1))
}

/// The device copy of `rope`'s inverse frequencies, uploaded once per distinct table.
fn rope_table(b: &Ctx, ropes: &mut Vec<(Vec<f32>, Table<CudaSlice<f32>>)>, rope: &Rope) -> u64 {
    let i = match ropes.iter().position(|(f, _)| *f == rope.inv_freq) {
        Some(i) => i,
        None => {
            let in_capture = b.dev.capturing();
            ropes.push((rope.inv_freq.clone(), Table { dev: b.dev.upload(&rope.inv_freq), in_capture }));
            ropes.len() - 1
        }
    };
    ptr(&ropes[i].1.dev, &b.dev.stream)
}

pub(crate) fn glu(b: &Ctx, gate: &CudaAct, up: &CudaAct, act: Activation) -> CudaAct {
    assert_eq!((gate.rows, gate.cols), (up.rows, up.cols), "glu: shapes differ");
    act_or_glu(b, gate, Some(up), act)
}

/// `act(x)` elementwise (an MLP without a gate): the glu kernel without its up operand.
pub(crate) fn activate(b: &Ctx, x: &CudaAct, act: Activation) -> CudaAct {
    act_or_glu(b, x, None, act)
}

/// `min(act(gate), limit) * clamp(up, -limit, limit)` elementwise (a clamped SwiGLU: kernels/ops.cu
/// `glu_clamped`), with the bf16 copy the down projection reads.
pub(crate) fn glu_clamped(b: &Ctx, gate: &CudaAct, up: &CudaAct, act: Activation, limit: f32) -> CudaAct {
    assert_eq!((gate.rows, gate.cols), (up.rows, up.cols), "glu_clamped: shapes differ");
    let d = &b.dev;
    let n = gate.len();
    let y = d.alloc::<f32>(n);
    let yb = bf16_out(&b.dev, gate.rows, gate.cols);
    if n > 0 {
        let args = [
            Arg::P(ptr(gate.data(&b.dev), &d.stream)),
            Arg::P(ptr(up.data(&b.dev), &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::P(ptr(&yb, &d.stream)),
            Arg::I(gate.rows as i32),
            Arg::I(gate.cols as i32),
            Arg::I(padded(gate.cols) as i32),
            Arg::I(act_code(act)),
            Arg::F(limit),
        ];
        d.launch(&d.k.glu_clamped, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    }
    CudaAct::with_bf16(y, yb, gate.rows, gate.cols)
}

/// `act(gate) * up`, clamped at `limit` where one is given ([`glu_clamped`]), else [`glu`].
pub(crate) fn glu_limited(b: &Ctx, gate: &CudaAct, up: &CudaAct, act: Activation, limit: Option<f32>) -> CudaAct {
    match limit {
        Some(l) => glu_clamped(b, gate, up, act, l),
        None => glu(b, gate, up, act),
    }
}

/// `x *= c` elementwise (kernels/ops.cu `scale_inplace`).
pub(crate) fn scale(b: &Ctx, x: &mut CudaAct, c: f32) {
    let (d, n) = (&b.dev, x.len());
    if n == 0 {
        return;
    }
    let args = [Arg::P(ptr(x.data(&b.dev), &d.stream)), Arg::Z(n), Arg::F(c)];
    d.launch(&d.k.scale_inplace, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    x.touched();
}

/// The kernels' code of an activation (ops.cu `act_one`, `glu_one`).
pub(crate) fn act_code(act: Activation) -> i32 {
    match act {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
        Activation::Relu2 => 2,
        Activation::SwigluOai => 3,
    }
}

fn act_or_glu(b: &Ctx, gate: &CudaAct, up: Option<&CudaAct>, act: Activation) -> CudaAct {
    let d = &b.dev;
    let n = gate.len();
    let y = d.alloc::<f32>(n);
    let yb = bf16_out(&b.dev, gate.rows, gate.cols);
    let args = [
        Arg::P(ptr(gate.data(&b.dev), &d.stream)),
        Arg::P(up.map_or(0, |u| ptr(u.data(&b.dev), &d.stream))),
        Arg::P(ptr(&y, &d.stream)),
        Arg::P(ptr(&yb, &d.stream)),
        Arg::I(gate.rows as i32),
        Arg::I(gate.cols as i32),
        Arg::I(padded(gate.cols) as i32),
        Arg::I(act_code(act)),
    ];
    // Four values a thread when rows are whole groups of four (kernels/ops.cu `glu`).
    let threads = if gate.cols.is_multiple_of(4) { n / 4 } else { n };
    d.launch(&d.k.glu, (grid_for(threads, BLOCK), 1, 1), BLOCK, 0, &args);
    CudaAct::with_bf16(y, yb, gate.rows, gate.cols)
}

/// `act(gate) * up` of a packed gate/up matmul output `[rows, 2 inter]` (`inter` a multiple of 8),
/// held as bf16 only: it feeds the down projection, which reads bf16.
pub(crate) fn glu_packed(b: &Ctx, p: &CudaAct, act: Activation) -> CudaAct {
    let d = &b.dev;
    let (rows, inter) = (p.rows, p.cols / 2);
    assert!(p.cols == 2 * inter && tf_backend::gate_up::packable(inter), "glu_packed: {} columns", p.cols);
    let yb = bf16_out(&b.dev, rows, inter);
    let args = [
        Arg::P(ptr(p.data(&b.dev), &d.stream)),
        Arg::P(ptr(&yb, &d.stream)),
        Arg::I(rows as i32),
        Arg::I(inter as i32),
        Arg::I(padded(inter) as i32),
        Arg::I(act_code(act)),
    ];
    let smem = d.small_smem(&d.k.glu_packed, rows);
    d.launch(&d.k.glu_packed, (grid_for(rows * inter / 4, BLOCK), 1, 1), BLOCK, smem, &args);
    CudaAct::bf16_only(yb, rows, inter)
}

/// Rows `idx` (a device list of `n` row numbers) of `x`.
pub(crate) fn gather(b: &Ctx, x: &CudaAct, idx: u64, n: usize) -> CudaAct {
    let d = &b.dev;
    let y = d.alloc::<f32>(n * x.cols);
    if n > 0 {
        let args = [
            Arg::P(ptr(x.data(&b.dev), &d.stream)),
            Arg::P(idx),
            Arg::P(ptr(&y, &d.stream)),
            Arg::I(n as i32),
            Arg::I(x.cols as i32),
        ];
        // 256 threads of 4 columns a block (kernels/ops.cu `select_rows`).
        d.launch(&d.k.select_rows, (n as u32, x.cols.div_ceil(1024).max(1) as u32, 1), 256, 0, &args);
    }
    CudaAct::new(y, n, x.cols)
}

/// Rows `idx` (a device address of `n` u32 row indices) of `x`'s bf16 copy, as an activation
/// held in bf16 only (the same values as [`gather`]'s rows rounded: what a matmul reads).
pub(crate) fn gather_bf16(b: &Ctx, x: &CudaAct, idx: u64, n: usize) -> CudaAct {
    let d = &b.dev;
    let kp = padded(x.cols);
    let y = d.alloc::<u16>(n * kp);
    if n > 0 {
        let args = [
            Arg::P(ptr(bf16_of(b, x), &d.stream)),
            Arg::P(idx),
            Arg::P(ptr(&y, &d.stream)),
            Arg::I(n as i32),
            Arg::I(kp as i32),
        ];
        // kernels/ops.cu `select_rows_bf16`: a block a row, 16 bytes a thread.
        d.launch(&d.k.select_rows_bf16, (n as u32, 1, 1), 256, 0, &args);
    }
    CudaAct::bf16_only(y, n, x.cols)
}

pub(crate) fn select_rows(b: &Ctx, x: &CudaAct, rows: &[usize]) -> CudaAct {
    let idx: Vec<u32> = rows
        .iter()
        .map(|&r| {
            assert!(r < x.rows, "select_rows: row {r} of {}", x.rows);
            r as u32
        })
        .collect();
    let buf = b.dev.upload(&idx);
    gather(b, x, ptr(&buf, &b.dev.stream), idx.len())
}

/// `x[r][c] += bias[c]` (kernels/ops.cu `add_bias`).
pub(crate) fn add_bias(b: &Ctx, x: &mut CudaAct, bias: &CudaVec) {
    let (d, n) = (&b.dev, x.len());
    assert_eq!(bias.len, x.cols, "add_bias: {} values for {} columns", bias.len, x.cols);
    if n == 0 {
        return;
    }
    let args =
        [Arg::P(ptr(x.data(&b.dev), &d.stream)), Arg::P(ptr(&bias.data, &d.stream)), Arg::Z(n), Arg::I(x.cols as i32)];
    d.launch(&d.k.add_bias, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    x.touched();
}

/// `x += sigmoid(g) * y` with `g` `[rows, 1]` (kernels/ops.cu `add_sigmoid_scaled`).
pub(crate) fn add_sigmoid_scaled(b: &Ctx, x: &mut CudaAct, y: &CudaAct, g: &CudaAct) {
    let (d, n) = (&b.dev, x.len());
    assert_eq!((y.rows, y.cols, g.rows, g.cols), (x.rows, x.cols, x.rows, 1), "add_sigmoid_scaled: shapes");
    if n == 0 {
        return;
    }
    let args = [
        Arg::P(ptr(x.data(&b.dev), &d.stream)),
        Arg::P(ptr(y.data(&b.dev), &d.stream)),
        Arg::P(ptr(g.data(&b.dev), &d.stream)),
        Arg::Z(n),
        Arg::I(x.cols as i32),
    ];
    d.launch(&d.k.add_sigmoid_scaled, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    x.touched();
}

pub(crate) fn softcap(b: &Ctx, x: &mut CudaAct, cap: f32) {
    let d = &b.dev;
    let n = x.len();
    d.launch(
        &d.k.softcap,
        (grid_for(n, BLOCK), 1, 1),
        BLOCK,
        0,
        &[Arg::P(ptr(x.data(&b.dev), &d.stream)), Arg::Z(n), Arg::F(cap)],
    );
    x.touched();
}

/// Columns an `argmax_partial` block aims at: 16 loads for each of its 128 threads.
const ARGMAX_SLICE: usize = 2048;
/// Most `argmax_partial` blocks a launch; with more rows the slices widen instead.
const ARGMAX_MAX_BLOCKS: usize = 8192;

/// Blocks a row and columns a block for `argmax_partial`: equal slices of at most
/// [`ARGMAX_SLICE`] columns, wider when `rows` times the blocks would pass [`ARGMAX_MAX_BLOCKS`];
/// every block starts inside the row.
pub(crate) fn argmax_split(rows: usize, cols: usize) -> (usize, usize) {
    let parts = cols.div_ceil(ARGMAX_SLICE).min(ARGMAX_MAX_BLOCKS / rows.max(1)).max(1);
    let slice = cols.div_ceil(parts).max(1);
    (cols.div_ceil(slice).max(1), slice)
}

/// Per row, the column of the first largest value; only the indices come back.
pub(crate) fn argmax_rows(b: &Ctx, x: &CudaAct) -> Vec<u32> {
    b.dev.download(&argmax_on_device(b, x), x.rows)
}

/// Per row of `x`, the column of the first largest value, left on the device (`x.rows` values;
/// zeros for rows without columns).
pub(crate) fn argmax_on_device(b: &Ctx, x: &CudaAct) -> CudaSlice<u32> {
    let d = &b.dev;
    if x.rows == 0 || x.cols == 0 {
        return d.zeros::<u32>(x.rows.max(1));
    }
    let (parts, slice) = argmax_split(x.rows, x.cols);
    let pv = d.alloc::<f32>(x.rows * parts);
    let pi = d.alloc::<i32>(x.rows * parts);
    let out = d.alloc::<u32>(x.rows);
    let args = [
        Arg::P(ptr(x.data(&b.dev), &d.stream)),
        Arg::P(ptr(&pv, &d.stream)),
        Arg::P(ptr(&pi, &d.stream)),
        Arg::I(x.rows as i32),
        Arg::I(x.cols as i32),
        Arg::I(slice as i32),
    ];
    // 128 threads a block; rows past the grid's 65535 loop inside (kernels/ops.cu `argmax_partial`).
    d.launch(&d.k.argmax_partial, (parts as u32, x.rows.min(65535) as u32, 1), 128, 0, &args);
    let args =
        [Arg::P(ptr(&pv, &d.stream)), Arg::P(ptr(&pi, &d.stream)), Arg::P(ptr(&out, &d.stream)), Arg::I(parts as i32)];
    d.launch(&d.k.argmax_combine, (x.rows as u32, 1, 1), 32, 0, &args);
    out
}

/// `ids[i] = held[ids[i]]` for the first `n` ids at device address `ids` (kernels/ops.cu
/// `gather_ids`): row indices written where a round reads its token ids, made those ids.
pub(crate) fn gather_ids(b: &Ctx, ids: u64, held: &CudaSlice<u32>, n: usize) {
    let d = &b.dev;
    if n == 0 {
        return;
    }
    let args = [Arg::P(ids), Arg::P(ptr(held, &d.stream)), Arg::I(n as i32)];
    d.launch(&d.k.gather_ids, (n.div_ceil(128) as u32, 1, 1), 128, 0, &args);
}

/// bf16 values in one block of K (or V).
fn kv_block_len(kv: &CudaKv) -> usize {
    kv.shape.block_size * kv.shape.num_kv_heads * kv.shape.head_dim
}

/// K then V of `blocks`, as little-endian bf16 bytes (a latent pool gives K twice, as the host
/// pools do, so sessions see one layout on every backend).
pub(crate) fn read_kv_blocks(b: &Ctx, kv: &CudaKv, blocks: &[u32]) -> Vec<u8> {
    let n = kv_block_len(kv);
    let mut out = Vec::with_capacity(4 * blocks.len() * n);
    let mut buf = vec![0u16; n];
    let values = if kv.shape.latent { &kv.k } else { &kv.v };
    for pool in [&kv.k, values] {
        for &blk in blocks {
            let start = blk as usize * n;
            must(b.dev.stream.memcpy_dtoh(&pool.slice(start..start + n), &mut buf), "reading KV blocks");
            out.extend(buf.iter().flat_map(|x| x.to_le_bytes()));
        }
    }
    out
}

/// Writes bytes laid out as [`read_kv_blocks`] gives them (a latent pool takes the K half and
/// leaves the repeat).
pub(crate) fn write_kv_blocks(b: &Ctx, kv: &mut CudaKv, blocks: &[u32], bytes: &[u8]) {
    let n = kv_block_len(kv);
    assert_eq!(bytes.len(), 4 * blocks.len() * n, "write_kv_blocks: byte count");
    let mut words = bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
    let pools = if kv.shape.latent { vec![&mut kv.k] } else { vec![&mut kv.k, &mut kv.v] };
    for pool in pools {
        for &blk in blocks {
            let vals: Vec<u16> = words.by_ref().take(n).collect();
            let start = blk as usize * n;
            must(b.dev.stream.memcpy_htod(&vals, &mut pool.slice_mut(start..start + n)), "writing KV blocks");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn qk_norm_rope_shares_rotations_only_where_warps_are_plenty() {
        let h = super::qk_heads_per_warp;
        assert_eq!((h(1, 40, 132), h(128, 40, 132), h(1024, 40, 132), h(4096, 40, 132)), (1, 1, 4, 10));
        assert_eq!((h(3000, 7, 132), h(4096, 3, 132), h(0, 40, 132), h(5, 0, 0)), (2, 1, 1, 1));
    }

    #[test]
    fn argmax_splits_rows_into_slices_that_cover_them() {
        let split = super::argmax_split;
        assert_eq!(split(1, 151936), (75, 2026));
        assert_eq!(
            (split(3, 7), split(5, 1000), split(1, 2048), split(1, 2049)),
            ((1, 7), (1, 1000), (1, 2048), (2, 1025))
        );
        // Many rows: fewer, wider slices, at least one a row.
        assert_eq!((split(600, 40000), split(70000, 3), split(9000, 151936)), ((13, 3077), (1, 3), (1, 151936)));
        for rows in [1, 2, 7, 64, 300, 8192, 70000] {
            for cols in [1, 2, 1023, 2047, 2048, 2049, 4097, 40000, 151936, 262144] {
                let (parts, slice) = split(rows, cols);
                assert!(parts >= 1 && (parts - 1) * slice < cols && parts * slice >= cols, "{rows}x{cols}");
                assert!(rows * parts <= super::ARGMAX_MAX_BLOCKS.max(rows), "{rows}x{cols}: too many blocks");
                let capped = rows * (parts + 1) > super::ARGMAX_MAX_BLOCKS;
                assert!(slice <= super::ARGMAX_SLICE || capped, "{rows}x{cols}: wide slices below the cap");
            }
        }
    }
}
