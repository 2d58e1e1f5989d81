//! Row-wise and elementwise ops (embedding, RMSNorm, RoPE, GLU, softcap, row selection); each
//! row's result depends on that row alone, so splitting work across threads changes no bit.

use crate::{CpuBackend, Simd, act_fn};
use rayon::prelude::*;
use tf_backend::{Activation, HostMat, HostTensor, Rope};

/// Below this many values an op stays on the calling thread (a pool round trip costs more).
const PAR_MIN: usize = 1 << 15;
/// Values per task in elementwise ops.
const CHUNK: usize = 1 << 13;

impl CpuBackend {
    /// `f(index, row)` over the `cols`-wide rows of `data`, in parallel when there is enough work.
    fn for_rows(&self, data: &mut [f32], cols: usize, f: impl Fn(usize, &mut [f32]) + Send + Sync) {
        if cols == 0 {
            return;
        }
        if data.len() < PAR_MIN {
            data.chunks_exact_mut(cols).enumerate().for_each(|(i, r)| f(i, r));
        } else {
            let min_rows = (CHUNK / cols).max(1);
            self.pool
                .install(|| data.par_chunks_mut(cols).enumerate().with_min_len(min_rows).for_each(|(i, r)| f(i, r)));
        }
    }

    /// `f(offset, chunk)` over fixed chunks of `data`, in parallel when there is enough work.
    fn for_chunks(&self, data: &mut [f32], f: impl Fn(usize, &mut [f32]) + Send + Sync) {
        if data.len() < PAR_MIN {
            f(0, data);
        } else {
            self.pool.install(|| data.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| f(i * CHUNK, c)));
        }
    }
}

/// Rows `ids` of `table`, times `scale`.
pub(crate) fn embed(cpu: &CpuBackend, table: &HostMat, ids: &[u32], scale: f32) -> HostTensor {
    let mut out = HostTensor::zeros(ids.len(), table.cols);
    cpu.for_rows(&mut out.data, table.cols, |r, row| {
        let id = ids[r] as usize;
        debug_assert!(id < table.rows, "embed: id {id} outside a table of {} rows", table.rows);
        table.row_f32(id, row);
        row.iter_mut().for_each(|x| *x *= scale);
    });
    out
}

/// RMSNorm over each consecutive group of `w.len()` values.
pub(crate) fn rms_norm(cpu: &CpuBackend, x: &HostTensor, w: &[f32], eps: f32, one_plus: bool) -> HostTensor {
    assert!(
        !w.is_empty() && x.data.len().is_multiple_of(w.len()),
        "rms_norm: {} values in groups of {}",
        x.data.len(),
        w.len()
    );
    let mut out = x.clone();
    let simd = cpu.simd;
    cpu.for_rows(&mut out.data, w.len(), |_, g| {
        let ms = simd.dot(g, g) / w.len() as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for (v, &s) in g.iter_mut().zip(w) {
            *v = *v * inv * if one_plus { 1.0 + s } else { s };
        }
    });
    out
}

/// `x += y`.
pub(crate) fn add_assign(cpu: &CpuBackend, x: &mut HostTensor, y: &HostTensor) {
    assert_eq!((x.rows, x.cols), (y.rows, y.cols), "add_assign: shapes differ");
    cpu.for_chunks(&mut x.data, |off, c| c.iter_mut().zip(&y.data[off..]).for_each(|(a, b)| *a += b));
}

/// Rotary embedding of every `head_dim`-wide head of each row at its position.
pub(crate) fn rope(cpu: &CpuBackend, x: &mut HostTensor, positions: &[u32], head_dim: usize, rope: &Rope) {
    assert_eq!(positions.len(), x.rows, "rope: {} positions for {} rows", positions.len(), x.rows);
    assert!(head_dim > 0 && x.cols.is_multiple_of(head_dim), "rope: {} columns in heads of {head_dim}", x.cols);
    let half = rope.inv_freq.len();
    assert!(2 * half <= head_dim, "rope: rotary width {} exceeds head_dim {head_dim}", 2 * half);
    cpu.for_rows(&mut x.data, x.cols, |r, row| {
        // The same (cos, sin) as `Rope::apply`, computed once per row for all heads.
        let pos = positions[r] as f32;
        let cos_sin: Vec<(f32, f32)> = rope
            .inv_freq
            .iter()
            .map(|&f| {
                let angle = pos * f;
                (angle.cos() * rope.attention_scaling, angle.sin() * rope.attention_scaling)
            })
            .collect();
        for head in row.chunks_exact_mut(head_dim) {
            Rope::rotate(head, half, &cos_sin);
        }
    });
}

/// `act(gate) * up`, elementwise, on the vectorized activations ([`crate::act_fn`]).
pub(crate) fn glu(cpu: &CpuBackend, gate: &HostTensor, up: &HostTensor, act: Activation) -> HostTensor {
    assert_eq!((gate.rows, gate.cols), (up.rows, up.cols), "glu: shapes differ");
    let mut out = HostTensor::zeros(gate.rows, gate.cols);
    let avx2 = cpu.simd == Simd::Avx2;
    cpu.for_chunks(&mut out.data, |off, c| act_fn::glu_slice(avx2, act, &gate.data[off..], &up.data[off..], c));
    out
}

/// `cap * tanh(x / cap)` in place.
pub(crate) fn softcap(cpu: &CpuBackend, x: &mut HostTensor, cap: f32) {
    cpu.for_chunks(&mut x.data, |_, c| c.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh()));
}

/// The listed rows of `x`, in order.
pub(crate) fn select_rows(x: &HostTensor, rows: &[usize]) -> HostTensor {
    let mut data = Vec::with_capacity(rows.len() * x.cols);
    for &r in rows {
        data.extend_from_slice(x.row(r));
    }
    HostTensor { data, rows: rows.len(), cols: x.cols }
}

#[cfg(test)]
mod tests {
    use crate::testutil::{DTYPES, Rng, bits, cpu, rand_mat, rel_err, simds, sub};
    use crate::{CpuBackend, Simd};
    use tf_backend::rope::RopeScaling;
    use tf_backend::{Activation, Backend, HostTensor, RefBackend, Rope};

    /// Backends to test: each instruction set, with a pool of 2.
    fn backends() -> Vec<CpuBackend> {
        simds().into_iter().map(|s| cpu(2, s)).collect()
    }

    /// Large enough to take the parallel path, with a ragged last chunk.
    const BIG: (usize, usize) = (37, 4096 + 11);

    #[test]
    fn embed_equals_the_reference_exactly() {
        let mut rng = Rng::new(20);
        for b in backends() {
            for dtype in DTYPES {
                let table = rand_mat(&mut rng, dtype, 50, 1030);
                let ids = [
                    3u32, 0, 49, 3, 17, 8, 8, 1, 2, 40, 41, 42, 43, 44, 45, 46, 47, 48, 5, 6, 7, 9, 10, 11, 12, 13, 14,
                    15, 16, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                ];
                let got = b.embed(&table, &ids, 1.7);
                assert_eq!(bits(&got), bits(&RefBackend.embed(&table, &ids, 1.7)), "{dtype}");
            }
        }
    }

    #[test]
    fn rms_norm_matches_the_reference_and_is_row_invariant() {
        let mut rng = Rng::new(21);
        for b in backends() {
            for (cols, group) in [(BIG.1, BIG.1), (4 * 67, 67), (512, 128)] {
                let x = rng.tensor(BIG.0, cols);
                let w = rng.vec(group);
                for one_plus in [false, true] {
                    let got = b.rms_norm(&x, &w, 1e-6, one_plus);
                    let e = rel_err(&got.data, &RefBackend.rms_norm(&x, &w, 1e-6, one_plus).data);
                    assert!(e < 1e-5, "{:?} cols {cols} group {group}: {e}", b.simd());
                    for r in [0, 5, BIG.0 - 1] {
                        assert_eq!(bits(&sub(&got, r, 1)), bits(&b.rms_norm(&sub(&x, r, 1), &w, 1e-6, one_plus)));
                    }
                }
            }
        }
    }

    #[test]
    fn rope_equals_the_reference_exactly() {
        let mut rng = Rng::new(22);
        let yarn = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position_embeddings: 4096.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
            truncate: true,
        };
        for b in backends() {
            for (head_dim, rot, scaling) in [(128, 128, RopeScaling::Default), (64, 32, yarn.clone())] {
                let r = Rope::new(rot, 10000.0, &scaling);
                let x = rng.tensor(300, 8 * head_dim);
                let positions: Vec<u32> = (0..300).map(|i| (i * 37 % 5000) as u32).collect();
                let (mut got, mut want) = (x.clone(), x.clone());
                b.rope(&mut got, &positions, head_dim, &r);
                RefBackend.rope(&mut want, &positions, head_dim, &r);
                assert_eq!(bits(&got), bits(&want), "head_dim {head_dim}");
            }
        }
    }

    #[test]
    fn softcap_add_and_select_equal_the_reference_exactly_and_glu_stays_within_ulps_of_it() {
        let mut rng = Rng::new(23);
        let b = cpu(2, Simd::detect());
        let (g, u) = (rng.tensor(BIG.0, BIG.1), rng.tensor(BIG.0, BIG.1));
        for act in [Activation::Silu, Activation::GeluTanh, Activation::SwigluOai, Activation::Relu2] {
            let (got, want) = (b.glu(&g, &u, act), RefBackend.glu(&g, &u, act));
            for ((x, y), (gv, uv)) in got.data.iter().zip(&want.data).zip(g.data.iter().zip(&u.data)) {
                let tol = 8.0 * f32::EPSILON * y.abs() + 2.0 * f32::EPSILON * (gv * uv).abs();
                assert!((x - y).abs() <= tol, "{act:?}: {x} vs {y}");
            }
            let portable = cpu(1, Simd::Portable).glu(&g, &u, act);
            assert_eq!(bits(&got), bits(&portable), "{act:?}: the AVX2 lanes are the portable path's bits");
        }
        let (mut x1, mut x2) = (g.clone(), g.clone());
        b.add_assign(&mut x1, &u);
        RefBackend.add_assign(&mut x2, &u);
        assert_eq!(bits(&x1), bits(&x2));
        b.softcap(&mut x1, 0.8);
        RefBackend.softcap(&mut x2, 0.8);
        assert_eq!(bits(&x1), bits(&x2));
        let rows = [4, 0, 36, 4];
        assert_eq!(bits(&b.select_rows(&g, &rows)), bits(&RefBackend.select_rows(&g, &rows)));
        let small = HostTensor { data: vec![1.0, -2.0], rows: 1, cols: 2 };
        assert_eq!(b.select_rows(&small, &[]).rows, 0);
    }
}
