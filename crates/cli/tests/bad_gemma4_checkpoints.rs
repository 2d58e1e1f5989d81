//! Gemma 4 checkpoints whose per-layer input tables, projections or norms, full layers' head
//! shapes, V projections, KV-shared layers, double-wide MLPs or MoE blocks disagree with their
//! config, and configs with options the family does not run (bidirectional attention), are
//! refused by `tensorfold check` with exit code 2 and one line naming the tensor (with the shape
//! expected and the shape found) or the option.

use serde_json::json;
mod checkpoint_util;

use checkpoint_util::{check, fixture as fixture_of, refused, set_tensor, with_config as with_config_of};

/// A copy of the gemma4 fixture whose config.json has `key` set to `value`.
fn with_config(key: &str, value: serde_json::Value) -> tempfile::TempDir {
    with_config_of("gemma4", key, value)
}

/// A copy of the gemma4 fixture whose checkpoint has `name` as a zero bf16 tensor of `shape`
/// in place of the one of that name.
fn with_tensor(name: &str, shape: &[usize]) -> tempfile::TempDir {
    with_tensor_of("gemma4", name, shape)
}

/// [`with_tensor`] on `family`'s fixture.
fn with_tensor_of(family: &str, name: &str, shape: &[usize]) -> tempfile::TempDir {
    let d = with_config_of(family, "model_type", json!("gemma4_text"));
    set_tensor(d.path(), name, Some(shape));
    d
}

#[test]
fn the_fixtures_pass() {
    for family in ["gemma4", "gemma4_kvshare", "gemma4_moe"] {
        let (code, err) = check(&fixture_of(family));
        assert_eq!(code, Some(0), "{family}: {err}");
    }
}

#[test]
fn kv_shared_layers_the_checkpoint_does_not_have() {
    // Every layer shared: none is left to make the K/V.
    let d = with_config("num_kv_shared_layers", json!(4));
    refused(d.path(), &["num_kv_shared_layers 4", "layer 0", "no earlier layer of its kind"]);
    let d = with_config("num_kv_shared_layers", json!(5));
    refused(d.path(), &["num_kv_shared_layers must be an integer from 0 to num_hidden_layers 4"]);
    // Layers 4 and 5 have no K/V projections of their own.
    let d = with_config_of("gemma4_kvshare", "num_kv_shared_layers", json!(0));
    refused(d.path(), &["model.layers.4.self_attn.k_proj.weight", "missing"]);
    // Their MLPs are twice as wide.
    let d = with_config_of("gemma4_kvshare", "use_double_wide_mlp", json!(false));
    refused(d.path(), &["model.layers.4.mlp.", "expected [128, 64]", "[256, 64]"]);
}

#[test]
fn per_layer_tables_and_projections_of_other_shapes() {
    // 4 layers of 8: the packed table and projection are 32 wide.
    let d = with_config("hidden_size_per_layer_input", json!(16));
    refused(d.path(), &["model.embed_tokens_per_layer.weight", "expected [512, 64]", "[512, 32]"]);
    let d = with_config("vocab_size_per_layer_input", json!(600));
    refused(d.path(), &["model.embed_tokens_per_layer.weight", "expected [600, 32]", "[512, 32]"]);
    let d = with_tensor("model.per_layer_model_projection.weight", &[32, 32]);
    refused(d.path(), &["model.per_layer_model_projection.weight", "expected [32, 64]", "[32, 32]"]);
    let d = with_tensor("model.per_layer_projection_norm.weight", &[16]);
    refused(d.path(), &["model.per_layer_projection_norm.weight", "expected [8]", "[16]"]);
    let d = with_tensor("model.layers.1.per_layer_input_gate.weight", &[16, 64]);
    refused(d.path(), &["model.layers.1.per_layer_input_gate.weight", "expected [8, 64]", "[16, 64]"]);
    let d = with_tensor("model.layers.2.per_layer_projection.weight", &[64, 16]);
    refused(d.path(), &["model.layers.2.per_layer_projection.weight", "expected [64, 8]", "[64, 16]"]);
    let d = with_tensor("model.layers.0.layer_scalar", &[2]);
    refused(d.path(), &["model.layers.0.layer_scalar", "expected [1]", "[2]"]);
    // A config without per-layer inputs: the tables are left over.
    let d = with_config("hidden_size_per_layer_input", serde_json::Value::Null);
    refused(d.path(), &["model.embed_tokens_per_layer.weight"]);
    // Fewer per-layer rows than ids.
    let d = with_config("vocab_size_per_layer_input", json!(256));
    refused(d.path(), &["vocab_size_per_layer_input 256"]);
}

#[test]
fn full_layers_of_other_shapes_or_with_a_v_projection_the_config_drops() {
    let narrow =
        json!({"1": {"head_dim": 16, "num_key_value_heads": 1}, "3": {"head_dim": 16, "num_key_value_heads": 1}});
    let d = with_config("per_layer_config", narrow);
    refused(d.path(), &["model.layers.1.self_attn.q_proj.weight", "expected [64, 64]", "[128, 64]"]);
    let d = with_config("per_layer_config", json!({"1": {"head_dim": 32, "num_key_value_heads": 1}}));
    refused(d.path(), &["per_layer_config", "full layer 3"]);
    let d = with_config("per_layer_config", json!({"0": {"head_dim": 32}}));
    refused(d.path(), &["per_layer_config", "sliding layer 0"]);
    // Without attention_k_eq_v the full layers need their own v_proj.
    let d = with_config("attention_k_eq_v", json!(false));
    refused(d.path(), &["model.layers.1.self_attn.v_proj.weight"]);
}

#[test]
fn options_the_family_does_not_run_are_named() {
    // The MoE block without its sizes.
    let d = with_config("enable_moe_block", json!(true));
    refused(d.path(), &["num_experts"]);
    let d = with_config("use_bidirectional_attention", json!("all"));
    refused(d.path(), &["use_bidirectional_attention", "not supported"]);
}

#[test]
fn moe_blocks_of_other_shapes() {
    const L: &str = "model.layers.2.";
    let d = with_config_of("gemma4_moe", "num_experts", json!(6));
    refused(d.path(), &["model.layers.0.router.proj.weight", "expected [6, 64]", "[8, 64]"]);
    let d = with_config_of("gemma4_moe", "moe_intermediate_size", json!(16));
    refused(d.path(), &["model.layers.0.experts.gate_up_proj", "expected [8, 32, 64]", "[8, 64, 64]"]);
    let d = with_tensor_of("gemma4_moe", &format!("{L}experts.down_proj"), &[8, 64, 16]);
    refused(d.path(), &[&format!("{L}experts.down_proj"), "expected [8, 64, 32]", "[8, 64, 16]"]);
    let d = with_tensor_of("gemma4_moe", &format!("{L}router.per_expert_scale"), &[4]);
    refused(d.path(), &[&format!("{L}router.per_expert_scale"), "expected [8]", "[4]"]);
    let d = with_tensor_of("gemma4_moe", &format!("{L}router.scale"), &[32]);
    refused(d.path(), &[&format!("{L}router.scale"), "expected [64]", "[32]"]);
    let d = with_config_of("gemma4_moe", "top_k_experts", json!(9));
    refused(d.path(), &["top_k_experts 9 is more than num_experts 8"]);
    // Without the MoE block the experts are left over.
    let d = with_config_of("gemma4_moe", "enable_moe_block", json!(false));
    refused(d.path(), &["model.layers.0.experts.down_proj"]);
}
