//! Which shapes a tensor-parallel load can shard, refused by name otherwise: attention (heads
//! split, KV and indexer heads split or shared), Gated DeltaNet (value heads split), Mamba2
//! (groups and their heads split), short conv (channels split), dense and routed MLPs (their
//! widths split), all evenly, or the routed experts whole (expert parallelism, any count of at
//! least the ranks); norms, routers, embeddings and indexers replicated.

use crate::error::ModelError;
use crate::spec::ModelSpec;

/// Refuses `spec` at `size` ranks unless every part of it can be cut into `size` even parts
/// (with `expert_parallel`, the routed experts into `size` parts of at least one whole expert).
pub fn check(spec: &ModelSpec, size: usize, expert_parallel: bool) -> Result<(), ModelError> {
    let refuse = |what: String| {
        Err(ModelError::Backend(tf_backend::BackendError::Unsupported(format!(
            "--tensor-parallel-size {size}: {} {what}",
            spec.architecture
        ))))
    };
    // Biases after row-parallel projections would be added once a rank (and sinks ride with
    // them): gpt-oss runs on one rank.
    if spec.attn_out_bias || spec.moe.as_ref().is_some_and(|m| m.gpt_oss) {
        return refuse("adds biases after its output and expert down projections, which are not sharded yet".into());
    }
    // Followers keep the rope they loaded; an engine's context may switch rank 0's alone.
    if spec.long_rope.is_some() {
        return refuse("uses LongRoPE, whose short and long factors are not switched on every rank yet".into());
    }
    // Value heads split evenly; key heads too, or each held by several ranks.
    if spec.gdn.as_ref().is_some_and(|g| g.tiled_v_heads) {
        return refuse("holds its value heads tiled over the key heads (a GGUF file), which ranks do not split".into());
    }
    if let Some(g) = &spec.gdn {
        let (hk, hv) = (g.num_k_heads, g.num_v_heads);
        if !hv.is_multiple_of(size) || hk == 0 || (!hk.is_multiple_of(size) && !size.is_multiple_of(hk)) {
            return refuse(format!(
                "has {hk} key and {hv} value heads of Gated DeltaNet, which {size} ranks cannot split"
            ));
        }
    }
    // KV heads split evenly, or each held by `size / n` ranks (full layers' own count too, and
    // MiniMax M3's indexer heads, which each rank's query heads read alike).
    let shared = [
        ("KV heads", Some(spec.num_kv_heads)),
        ("full layers' KV heads", spec.full_attn_shape.map(|(kv, _)| kv)),
        ("indexer heads", spec.index.as_ref().map(|x| x.num_heads)),
    ];
    for (what, n) in shared.into_iter().filter_map(|(w, n)| n.map(|n| (w, n))) {
        if n == 0 || (!n.is_multiple_of(size) && !size.is_multiple_of(n)) {
            return refuse(format!("has {n} {what}, which neither split evenly over {size} ranks nor divide them"));
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
        if !expert_parallel {
            even.push(("moe_intermediate_size", m.moe_intermediate_size));
        } else if m.num_experts < size {
            return refuse(format!("has {} routed experts, fewer than the ranks to split them over", m.num_experts));
        }
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
