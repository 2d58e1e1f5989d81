//! Mixture of experts: rows grouped by expert, each expert's MLP run once over its rows with the
//! batch-invariant matmul, then each row's outputs combined in its own top-k rank order.

use crate::CpuBackend;
use tf_backend::reference::{expert_out, route};
use tf_backend::{Backend, Experts, HostMat, HostTensor, MoeParams};

/// Routes every row, runs each chosen expert over its rows, and sums per row by rank.
pub(crate) fn moe(
    cpu: &CpuBackend,
    x: &HostTensor,
    logits: &HostTensor,
    experts: &Experts<HostMat, Vec<f32>>,
    p: &MoeParams,
) -> HostTensor {
    let (num_experts, held) = (experts.up.len(), experts.held());
    assert_eq!(logits.rows, x.rows, "moe: {} router rows for {} rows", logits.rows, x.rows);
    assert!(held.end <= logits.cols, "moe: experts {held:?} held of {} router logits", logits.cols);
    assert!(
        (experts.gate.is_empty() || experts.gate.len() == num_experts) && experts.down.len() == num_experts,
        "moe: expert lists differ in length"
    );
    let bias = experts.choice_bias.as_deref();
    // Each row's chosen experts that are held here, indexed among them.
    let routes: Vec<Vec<(usize, f32)>> = (0..x.rows)
        .map(|r| {
            let chosen = route(logits.row(r), bias, p).into_iter();
            chosen.filter(|(e, _)| held.contains(e)).map(|(e, w)| (e - held.start, w)).collect()
        })
        .collect();
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
                expert_out(cpu, &xe, experts, e, p)
            })
        })
        .collect();
    let hidden = x.cols;
    let mut out = HostTensor::zeros(x.rows, hidden);
    let mut next = vec![0usize; num_experts];
    for (r, chosen) in routes.iter().enumerate() {
        let o = &mut out.data[r * hidden..(r + 1) * hidden];
        for &(e, weight) in chosen {
            let Some(y) = outputs[e].as_ref() else { unreachable!("a chosen expert ran") };
            let y = y.row(next[e]);
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
    use tf_backend::{Activation, Backend, Experts, HostMat, MoeParams, MoeScoring, RefBackend};
    use tf_core::DType;

    fn experts(rng: &mut Rng, dtype: DType, n: usize, hidden: usize, inter: usize) -> Experts<HostMat, Vec<f32>> {
        Experts {
            gate: (0..n).map(|_| rand_mat(rng, dtype, inter, hidden)).collect(),
            up: (0..n).map(|_| rand_mat(rng, dtype, inter, hidden)).collect(),
            down: (0..n).map(|_| rand_mat(rng, dtype, hidden, inter)).collect(),
            choice_bias: None,
            biases: None,
            first: 0,
        }
    }

    /// Every router variant: softmax; sigmoid with a bias, groups and scaling (GLM / DeepSeek);
    /// sigmoid with LFM2's eps; ungated relu2 experts (Nemotron-H).
    fn variants(
        rng: &mut Rng,
        dtype: DType,
        n: usize,
        hidden: usize,
        inter: usize,
    ) -> Vec<(MoeParams, Experts<HostMat, Vec<f32>>)> {
        let sig = |top_k, n_group, topk_group, norm_eps, act| MoeParams {
            top_k,
            scoring: MoeScoring::Sigmoid,
            n_group,
            topk_group,
            norm_topk_prob: true,
            norm_eps,
            scale: 2.5,
            act,
            clamp: None,
        };
        let mut out = Vec::new();
        for norm in [true, false] {
            out.push((MoeParams::softmax(2, norm, Activation::Silu), experts(rng, dtype, n, hidden, inter)));
        }
        let mut biased = experts(rng, dtype, n, hidden, inter);
        biased.choice_bias = Some(rng.vec(n).iter().map(|v| 0.3 * v).collect());
        out.push((sig(2, 3, 2, 1e-20, Activation::Silu), biased));
        out.push((sig(2, 1, 1, 1e-6, Activation::Silu), experts(rng, dtype, n, hidden, inter)));
        let clamped = MoeParams { clamp: Some(0.05), ..sig(2, 1, 1, 0.0, Activation::Silu) };
        out.push((clamped, experts(rng, dtype, n, hidden, inter)));
        let mut ungated = experts(rng, dtype, n, hidden, inter);
        ungated.gate.clear();
        out.push((sig(3, 1, 1, 1e-20, Activation::Relu2), ungated));
        out
    }

    #[test]
    fn matches_the_reference_and_each_row_is_independent_of_the_others() {
        let mut rng = Rng::new(40);
        for simd in simds() {
            let b = cpu(2, simd);
            for dtype in DTYPES {
                for (i, (p, ex)) in variants(&mut rng, dtype, 6, 67, 45).into_iter().enumerate() {
                    let x = rng.tensor(11, 67);
                    let logits = rng.tensor(11, 6);
                    let got = b.moe(&x, &logits, &ex, &p);
                    let e = rel_err(&got.data, &RefBackend.moe(&x, &logits, &ex, &p).data);
                    assert!(e < 1e-5, "{simd:?} {dtype} variant {i}: {e}");
                    for r in 0..11 {
                        let alone = b.moe(&sub(&x, r, 1), &sub(&logits, r, 1), &ex, &p);
                        assert_eq!(bits(&sub(&got, r, 1)), bits(&alone), "{simd:?} {dtype} variant {i} row {r}");
                    }
                }
            }
        }
    }
}
