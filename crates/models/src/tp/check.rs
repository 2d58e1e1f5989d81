//! Which specs a tensor-parallel load can shard, refused by name otherwise: attention (heads
//! split, KV heads split or shared), Gated DeltaNet (value heads split), Mamba2 (groups and
//! their heads split), short conv (channels split), dense and routed MLPs (their widths split),
//! all evenly; norms, routers, embedding and per-layer inputs replicated.

use crate::error::ModelError;
use crate::spec::ModelSpec;

/// Refuses `spec` at `size` ranks unless every part of it can be cut into `size` even parts.
pub fn check(spec: &ModelSpec, size: usize) -> Result<(), ModelError> {
    let refuse = |what: String| {
        Err(ModelError::Backend(tf_backend::BackendError::Unsupported(format!(
            "--tensor-parallel-size {size}: {} {what}",
            spec.architecture
        ))))
    };
    if spec.index.is_some() {
        let why = "has block-sparse attention, whose indexer keys share pools shaped like the attention's";
        return refuse(format!("{why}: not sharded yet"));
    }
    // Value heads split evenly; key heads too, or each held by several ranks.
    if let Some(g) = &spec.gdn {
        let (hk, hv) = (g.num_k_heads, g.num_v_heads);
        if !hv.is_multiple_of(size) || hk == 0 || (!hk.is_multiple_of(size) && !size.is_multiple_of(hk)) {
            return refuse(format!(
                "has {hk} key and {hv} value heads of Gated DeltaNet, which {size} ranks cannot split"
            ));
        }
    }
    // KV heads split evenly, or each held by `size / num_kv_heads` ranks (full layers' too,
    // where they have a count of their own).
    for kv in [Some(spec.num_kv_heads), spec.full_attn_shape.map(|(kv, _)| kv)].into_iter().flatten() {
        if kv == 0 || (!kv.is_multiple_of(size) && !size.is_multiple_of(kv)) {
            return refuse(format!("has {kv} KV heads, which neither split evenly over {size} ranks nor divide them"));
        }
    }
    let mut even = vec![("num_attention_heads", spec.num_heads), ("intermediate_size", spec.intermediate_size)];
    // A layer's own query head count (Step's sliding layers).
    even.extend(spec.layer_heads.iter().map(|&h| ("a layer's query heads", h)));
    if let Some(m) = &spec.mamba {
        // Each rank holds whole groups (the gated norm is per group) and their heads.
        even.push(("n_groups (Mamba2)", m.n_groups));
        even.push(("mamba_num_heads", m.num_heads));
    }
    if spec.conv.is_some() {
        even.push(("hidden_size (the short conv's channels)", spec.hidden_size));
    }
    if spec.wide_mlp_from.is_some() {
        even.push(("2 * intermediate_size", 2 * spec.intermediate_size));
    }
    if let Some(m) = &spec.moe {
        even.push(("moe_intermediate_size", m.moe_intermediate_size));
        if let Some(sh) = &m.shared {
            even.push(("shared experts' intermediate_size", sh.intermediate_size));
        }
    }
    if let Some((name, n)) = even.iter().find(|(_, n)| !n.is_multiple_of(size)) {
        return refuse(format!("has {name} {n}, which {size} ranks cannot split evenly"));
    }
    if spec.vocab_size < size {
        return refuse(format!("has {} vocabulary rows, fewer than the ranks", spec.vocab_size));
    }
    Ok(())
}
