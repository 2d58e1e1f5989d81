//! Decode rounds of the families with recurrent layers recorded as CUDA graphs (graph.rs: the
//! state kernels' tables among a recording's inputs, a pad row without state) against the same
//! rounds run op by op.

mod common;

use tf_testkit::{HYBRIDS, Req, config, engine, mixed_request, on_cuda, run};

/// The families with recurrent layers decode from recorded graphs (a recording's inputs hold
/// their state tables; a pad row has no state): six requests at once, greedy and seeded (rounds
/// padded to eight rows), give the tokens an engine that never records gives.
#[test]
fn recorded_hybrid_rounds_equal_op_by_op() {
    if common::backend().is_none() {
        return;
    }
    let on = || common::backend().expect("the GPU was there a moment ago");
    let off = || common::backend_no_graphs().expect("the GPU was there a moment ago");
    let reqs: Vec<Req> = (0..6).map(|i| mixed_request(i, i % 2 == 1)).collect();
    for &family in HYBRIDS.iter().filter(|f| on_cuda(f)) {
        let recorded = run(&engine(&on, family, config(256, 256, 512, false)), &reqs);
        let op_by_op = run(&engine(&off, family, config(256, 256, 512, false)), &reqs);
        assert!(recorded == op_by_op, "{family}: recorded rounds differ from op by op");
    }
}
