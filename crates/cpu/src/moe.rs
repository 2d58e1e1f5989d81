//! Mixture of experts: rows grouped by expert, each expert's MLP run once over its rows with the
//! batch-invariant matmul, then each row's outputs combined in its own top-k rank order.

use crate::CpuBackend;
use tf_backend::reference::route;
use tf_backend::{Backend, Experts, HostMat, HostTensor, MoeParams};

/// Routes every row, runs each chosen expert over its rows, and sums per row by rank.
pub(crate) fn moe(
    cpu: &CpuBackend,
    x: &HostTensor,
    logits: &HostTensor,
    experts: &Experts<HostMat>,
    p: &MoeParams,
) -> HostTensor {
    let num_experts = experts.gate.len();
    assert_eq!(logits.rows, x.rows, "moe: {} router rows for {} rows", logits.rows, x.rows);
    assert_eq!(logits.cols, num_experts, "moe: {} router logits for {num_experts} experts", logits.cols);
    assert!(experts.up.len() == num_experts && experts.down.len() == num_experts, "moe: expert lists differ in length");
    let routes: Vec<Vec<(usize, f32)>> = (0..x.rows).map(|r| route(logits.row(r), p)).collect();
    // Rows of each expert, ascending.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); num_experts];
    for (r, chosen) in routes.iter().enumerate() {
        for &(e, _) in chosen {
            members[e].push(r);
        }
    }
    // Output rows of each expert, in its members' order.
    let outputs: Vec<Option<HostTensor>> = members
        .iter()
        .enumerate()
        .map(|(e, rows)| {
            (!rows.is_empty()).then(|| {
                let xe = cpu.select_rows(x, rows);
                let h = cpu.glu(&cpu.matmul(&xe, &experts.gate[e]), &cpu.matmul(&xe, &experts.up[e]), p.act);
                cpu.matmul(&h, &experts.down[e])
            })
        })
        .collect();
    let hidden = x.cols;
    let mut out = HostTensor::zeros(x.rows, hidden);
    let mut next = vec![0usize; num_experts];
    for (r, chosen) in routes.iter().enumerate() {
        let o = &mut out.data[r * hidden..(r + 1) * hidden];
        for &(e, weight) in chosen {
            let y = outputs[e].as_ref().expect("a chosen expert ran").row(next[e]);
            assert_eq!(y.len(), hidden, "moe: expert {e} returns {} values for hidden {hidden}", y.len());
            next[e] += 1;
            for (oi, v) in o.iter_mut().zip(y) {
                *oi += weight * v;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::testutil::{DTYPES, Rng, bits, cpu, rand_mat, rel_err, simds, sub};
    use tf_backend::{Activation, Backend, Experts, HostMat, RefBackend};
    use tf_core::DType;

    fn experts(rng: &mut Rng, dtype: DType, n: usize, hidden: usize, inter: usize) -> Experts<HostMat> {
        Experts {
            gate: (0..n).map(|_| rand_mat(rng, dtype, inter, hidden)).collect(),
            up: (0..n).map(|_| rand_mat(rng, dtype, inter, hidden)).collect(),
            down: (0..n).map(|_| rand_mat(rng, dtype, hidden, inter)).collect(),
        }
    }

    #[test]
    fn matches_the_reference_and_each_row_is_independent_of_the_others() {
        let mut rng = Rng::new(40);
        for simd in simds() {
            let b = cpu(2, simd);
            for (dtype, norm) in DTYPES.into_iter().zip([true, false, true]) {
                let ex = experts(&mut rng, dtype, 6, 67, 45);
                let p = tf_backend::MoeParams { top_k: 2, norm_topk_prob: norm, act: Activation::Silu };
                let x = rng.tensor(11, 67);
                let logits = rng.tensor(11, 6);
                let got = b.moe(&x, &logits, &ex, &p);
                let e = rel_err(&got.data, &RefBackend.moe(&x, &logits, &ex, &p).data);
                assert!(e < 1e-5, "{simd:?} {dtype}: {e}");
                for r in 0..11 {
                    let alone = b.moe(&sub(&x, r, 1), &sub(&logits, r, 1), &ex, &p);
                    assert_eq!(bits(&sub(&got, r, 1)), bits(&alone), "{simd:?} {dtype} row {r}");
                }
            }
        }
    }
}
