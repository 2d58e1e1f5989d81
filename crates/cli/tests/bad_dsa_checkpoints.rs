//! GLM-5 / DeepSeek V3.2 checkpoints whose lightning indexer disagrees with their config (head
//! count or width, a missing indexer tensor, a norm of another width) or whose config names an
//! indexer option that is not run (`index_topk` out of range, shared indexer layers, no
//! low-rank query) are refused by `tensorfold check` with exit code 2 and one line naming the
//! tensor or field, and for a shape the shape expected and the shape found.

mod checkpoint_util;

use checkpoint_util::{check, fixture, refused, set_tensor, with_config};

/// A copy of the glm_moe_dsa fixture whose checkpoint lacks `name`, or (with `shape`) has it as a
/// zero bf16 tensor of that shape.
fn with_tensor(name: &str, shape: Option<&[usize]>) -> tempfile::TempDir {
    let d = with_config("glm_moe_dsa", "num_nextn_predict_layers", 0.into());
    set_tensor(d.path(), name, shape);
    d
}

const IX: &str = "model.layers.0.self_attn.indexer.";

#[test]
fn the_fixtures_pass() {
    for family in ["glm_moe_dsa", "deepseek_v32", "deepseek_v32_allkeys"] {
        let (code, err) = check(&fixture(family));
        assert_eq!(code, Some(0), "{family}: {err}");
    }
}

#[test]
fn indexer_dims_the_checkpoint_does_not_have() {
    // 16 heads of 32: wq_b [512, 48], wk [32, 64], weights_proj [16, 64], k_norm [32].
    let d = with_config("glm_moe_dsa", "index_n_heads", 8.into());
    refused(d.path(), &[&format!("{IX}wq_b.weight"), "expected [256, 48]", "[512, 48]"]);
    let d = with_config("deepseek_v32", "index_head_dim", 16.into());
    refused(d.path(), &[&format!("{IX}wq_b.weight"), "expected [256, 48]", "[512, 48]"]);
    let name = format!("{IX}weights_proj.weight");
    refused(with_tensor(&name, Some(&[8, 64])).path(), &[&name, "expected [16, 64]", "[8, 64]"]);
    let name = format!("{IX}k_norm.bias");
    refused(with_tensor(&name, Some(&[16])).path(), &[&name, "expected [32]", "[16]"]);
}

#[test]
fn missing_indexer_tensors() {
    for t in ["wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias", "weights_proj.weight"] {
        let name = format!("{IX}{t}");
        refused(with_tensor(&name, None).path(), &[&name, "missing"]);
    }
}

#[test]
fn indexer_options_that_are_not_run() {
    let d = with_config("glm_moe_dsa", "index_topk", 0.into());
    refused(d.path(), &["index_topk", "positive integer"]);
    let d = with_config("deepseek_v32", "index_topk", (-8).into());
    refused(d.path(), &["index_topk", "positive integer"]);
    let d = with_config("glm_moe_dsa", "indexer_types", serde_json::json!(["full", "shared", "full"]));
    refused(d.path(), &["indexer_types", "layer 1", "shared"]);
    let d = with_config("glm_moe_dsa", "q_lora_rank", serde_json::Value::Null);
    refused(d.path(), &["q_lora_rank", "indexer"]);
    let d = with_config("deepseek_v32", "index_head_dim", 8.into());
    refused(d.path(), &["index_head_dim 8", "qk_rope_head_dim 16"]);
}
