//! Fuzzes a tensor-parallel follower's check of rank 0's round plans (tf_models::tp::plan): any
//! bytes must give a plan every field of which is in bounds, or a `PlanError`, never a panic or
//! an allocation past the input; an accepted round builds its attention metadata (each row's
//! slot from its block table) and encodes back to the same bytes. Seeds:
//! crates/engine/tests/corpus/plan (`scripts/fuzz.sh` runs it as CI does).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_models::tp::plan::{Bounds, Plan};

const BOUNDS: Bounds = Bounds { vocab: 512, num_layers: 4, max_position: 256, pools: Some((16, 16, 4)) };

fuzz_target!(|data: &[u8]| {
    for bounds in [BOUNDS, Bounds { pools: None, ..BOUNDS }] {
        let Ok(plan) = Plan::decode(data, &bounds) else { continue };
        assert_eq!(plan.encode(), data, "an accepted plan is its own encoding");
        if let Plan::Round(r) = &plan {
            let meta = r.meta();
            assert_eq!(meta.slot_mapping.len(), r.ids.len());
            assert!(meta.slot_mapping.iter().all(|&s| s < 16 * 16));
        }
    }
});
