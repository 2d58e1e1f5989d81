//! MiniMax M3 checkpoints whose lightning indexer tensors disagree with their config (head
//! count, head width, norms, sparse layers) or whose config asks for what is not run are
//! refused by `tensorfold check` with exit code 2 and one line naming the tensor (expected and
//! found) or the field; the fixtures' vision tower is left unread.

mod checkpoint_util;

use checkpoint_util::{check, copy, edit_config, fixture, refused, set_tensor};

/// A copy of the minimax_m3 fixture whose `text_config` has `key` set to `value`.
fn with_config(key: &str, value: serde_json::Value) -> tempfile::TempDir {
    let d = copy("minimax_m3");
    edit_config(d.path(), |v| v["text_config"][key] = value);
    d
}

/// A copy of the minimax_m3 fixture (`index_n_heads` 2) whose checkpoint has `name` as a zero
/// bf16 tensor of `shape`, replacing the one of that name.
fn with_tensor(name: &str, shape: &[usize]) -> tempfile::TempDir {
    let d = with_config("index_n_heads", 2.into());
    set_tensor(d.path(), name, Some(shape));
    d
}

const ATTN: &str = "language_model.model.layers.1.self_attn.";

#[test]
fn the_fixtures_pass() {
    for family in ["minimax_m3", "minimax_m3_cover"] {
        let (code, err) = check(&fixture(family));
        assert_eq!(code, Some(0), "{family}: {err}");
    }
}

#[test]
fn indexer_heads_and_widths_the_projections_do_not_have() {
    let d = with_config("index_n_heads", 4.into());
    refused(d.path(), &[&format!("{ATTN}index_q_proj.weight"), "expected [64, 64]", "[32, 64]"]);
    let d = with_config("index_head_dim", 32.into());
    refused(d.path(), &[&format!("{ATTN}index_q_proj.weight"), "expected [64, 64]", "[32, 64]"]);
    let name = format!("{ATTN}index_k_proj.weight");
    refused(with_tensor(&name, &[32, 64]).path(), &[&name, "expected [16, 64]", "[32, 64]"]);
    let name = format!("{ATTN}index_k_norm.weight");
    refused(with_tensor(&name, &[8]).path(), &[&name, "expected [16]", "[8]"]);
    let name = format!("{ATTN}index_q_norm.weight");
    refused(with_tensor(&name, &[32]).path(), &[&name, "expected [16]", "[32]"]);
}

#[test]
fn sparse_layers_the_checkpoint_does_not_have() {
    // Layer 0 made sparse: its indexer is missing.
    let d = with_config("layer_types", serde_json::json!(["minimax_m3_sparse", "minimax_m3_sparse", "full_attention"]));
    refused(d.path(), &["language_model.model.layers.0.self_attn.index_q_proj.weight", "missing"]);
    // Layer 2 made full: its indexer is left over.
    let d = with_config("layer_types", serde_json::json!(["full_attention", "minimax_m3_sparse", "full_attention"]));
    refused(d.path(), &["does not use", "language_model.model.layers.2.self_attn.index_k_norm.weight"]);
}

#[test]
fn options_not_run_are_refused_by_name() {
    for (key, value, needle) in [
        ("index_local_blocks", serde_json::json!(4), "index_local_blocks 4"),
        ("index_n_heads", serde_json::json!(3), "index_n_heads 3"),
        ("index_head_dim", serde_json::json!(8), "index_head_dim 8"),
        ("swiglu_alpha", serde_json::json!(1.5), "swiglu_alpha"),
        ("rotary_dim", serde_json::json!(32), "rotary_dim 32"),
        (
            "layer_types",
            serde_json::json!(["full_attention", "sliding_attention", "full_attention"]),
            "sliding_attention",
        ),
    ] {
        refused(with_config(key, value).path(), &[needle]);
    }
}
