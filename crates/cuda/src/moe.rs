//! Mixture of experts: routing on the host (the reference `route`, so expert choice matches the
//! CPU backends exactly given the same router logits), then per expert a gather, the expert's
//! gated MLP through the ordinary matmul kernels, and a weighted scatter-add. Experts are applied
//! in index order, so each row's sum has a fixed order whatever else is batched with it.

use crate::CudaBackend;
use crate::device::{Arg, ptr};
use crate::matmul::matmul;
use crate::ops::{gather, glu};
use crate::tensor::{CudaAct, CudaMat};
use tf_backend::reference::route;
use tf_backend::{Experts, MoeParams};

pub(crate) fn moe(
    b: &CudaBackend,
    x: &CudaAct,
    router_logits: &CudaAct,
    experts: &Experts<CudaMat>,
    p: &MoeParams,
) -> CudaAct {
    assert_eq!(experts.gate.len(), router_logits.cols, "moe: router width vs experts");
    moe_by(b, x, router_logits, |e| [&experts.gate[e], &experts.up[e], &experts.down[e]], p)
}

/// [`moe`] over experts held in any container: `experts(e)` gives expert `e`'s gate, up, down.
pub(crate) fn moe_by<'a>(
    b: &CudaBackend,
    x: &CudaAct,
    router_logits: &CudaAct,
    experts: impl Fn(usize) -> [&'a CudaMat; 3],
    p: &MoeParams,
) -> CudaAct {
    let d = &b.dev;
    let num_experts = router_logits.cols;
    assert_eq!(router_logits.rows, x.rows, "moe: one router row per token");
    let logits = d.download(router_logits.data(b), router_logits.rows * num_experts);
    let mut lists: Vec<Vec<(u32, f32)>> = vec![Vec::new(); num_experts];
    for r in 0..x.rows {
        for (e, w) in route(&logits[r * num_experts..(r + 1) * num_experts], p) {
            lists[e].push((r as u32, w));
        }
    }
    let rows: Vec<u32> = lists.iter().flatten().map(|&(r, _)| r).collect();
    let weights: Vec<f32> = lists.iter().flatten().map(|&(_, w)| w).collect();
    let (rows_d, weights_d) = (d.upload(&rows), d.upload(&weights));
    let (rbase, wbase) = (ptr(&rows_d, &d.stream), ptr(&weights_d, &d.stream));
    let out = d.zeros::<f32>(x.rows * x.cols);
    let mut start = 0usize;
    for (e, list) in lists.iter().enumerate() {
        let n = list.len();
        if n == 0 {
            continue;
        }
        let (ri, wi) = (rbase + 4 * start as u64, wbase + 4 * start as u64);
        let [gate, up, down] = experts(e);
        let xe = gather(b, x, ri, n);
        let h = glu(b, &matmul(b, &xe, gate), &matmul(b, &xe, up), p.act);
        let y = matmul(b, &h, down);
        let args = [
            Arg::P(ptr(&out, &d.stream)),
            Arg::P(ptr(y.data(b), &d.stream)),
            Arg::P(ri),
            Arg::P(wi),
            Arg::I(x.cols as i32),
        ];
        d.launch(&d.k.scatter_add, (n as u32, 1, 1), 256, 0, &args);
        start += n;
    }
    CudaAct::new(out, x.rows, x.cols)
}
