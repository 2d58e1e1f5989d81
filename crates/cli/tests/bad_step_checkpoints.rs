//! Step 3.7 checkpoints whose stacked experts, sliding-layer heads, shared expert or MTP layer
//! disagree with their `text_config`, or whose config asks for what the decoder does not run,
//! are refused by `tensorfold check` with exit code 2 and one line naming the tensor (expected
//! and found shape) or the field.

mod checkpoint_util;

use checkpoint_util::{check, copy, edit_config, refused};
use std::path::PathBuf;

/// The step3p7 fixture.
fn fixture() -> PathBuf {
    checkpoint_util::fixture("step3p7")
}

/// A copy of the step3p7 fixture whose `text_config` `edit` changes.
fn with_text_config(edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let d = copy("step3p7");
    edit_config(d.path(), |v| edit(&mut v["text_config"]));
    d
}

#[test]
fn the_fixture_passes_with_its_vision_tower_and_mtp_layer_unread() {
    let (code, err) = check(&fixture());
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn shapes_the_weights_do_not_have_name_the_tensor() {
    let t = with_text_config(|t| t["moe_intermediate_size"] = 32.into());
    refused(t.path(), &["model.layers.1.moe.gate_proj.weight", "[8, 32, 64]", "[8, 24, 64]"]);
    let t = with_text_config(|t| t["attention_other_setting"]["num_attention_heads"] = 4.into());
    refused(t.path(), &["model.layers.0.self_attn.g_proj.weight", "[8, 64]", "expected [4, 64]"]);
    let t = with_text_config(|t| t["share_expert_dim"] = 48.into());
    refused(t.path(), &["model.layers.1.share_expert.gate_proj.weight", "[48, 64]", "[40, 64]"]);
    let t = with_text_config(|t| t["moe_num_experts"] = 16.into());
    refused(t.path(), &["model.layers.1.moe.gate.weight", "[16, 64]", "[8, 64]"]);
    // Layer 0 made MoE: its dense MLP's weights are where experts should be.
    let t = with_text_config(|t| t["moe_layers_enum"] = "0,1,3,4".into());
    refused(t.path(), &["model.layers.0.moe"]);
}

#[test]
fn the_mtp_layer_is_unread_only_where_the_config_names_it() {
    let t = with_text_config(|t| {
        t["num_nextn_predict_layers"] = 0.into();
        for key in ["layer_types", "rope_theta", "partial_rotary_factors", "swiglu_limits", "swiglu_limits_shared"] {
            t[key].as_array_mut().unwrap().pop();
        }
        t["moe_layers_enum"] = "1,3".into();
    });
    refused(t.path(), &["model.layers.4."]);
}

#[test]
fn options_it_does_not_run_are_refused_by_name() {
    for (key, value, says) in [
        ("use_bidirectional_attention", serde_json::json!(true), "use_bidirectional_attention"),
        ("attention_bias", serde_json::json!(true), "attention_bias"),
        ("mlp_bias", serde_json::json!(true), "mlp_bias"),
        ("gating", serde_json::json!("per-channel"), "gating"),
        ("sparse_attention_config", serde_json::json!({"sparse_num_index_heads": 4}), "sparse_attention_config"),
        ("rope_theta", serde_json::json!([1e4, 5e4, 2e4, 5e4, 5e4]), "rope_theta"),
        ("swiglu_limits", serde_json::json!([0, 0, 0]), "swiglu_limits"),
        ("swiglu_limits_shared", serde_json::json!([0, -1, 0, 0]), "swiglu_limits_shared"),
        (
            "layer_types",
            serde_json::json!(["minimax_m3_sparse", "full_attention", "sliding_attention", "full_attention"]),
            "minimax_m3_sparse",
        ),
        ("attention_other_setting", serde_json::json!({"num_attention_heads": 8, "head_dim": 32}), "head_dim"),
        ("moe_top_k", serde_json::json!(9), "router"),
        ("num_key_value_heads", serde_json::json!(4), "num_attention_groups"),
        ("rope_parameters", serde_json::json!({"rope_theta": 1e4}), "rope_parameters"),
    ] {
        let t = with_text_config(|t| t[key] = value);
        refused(t.path(), &[says]);
    }
}
