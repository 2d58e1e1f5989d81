//! DeepSeek V3 checkpoints whose latent attention ranks, head widths or norms, router bias or
//! MTP layers disagree with their config are refused by `tensorfold check` with exit code 2 and
//! one line naming the tensor and, for a shape, the shape expected and the shape found.

mod checkpoint_util;

use checkpoint_util::{check, fixture, refused, set_tensor, with_config};

/// A copy of the deepseek_v3 fixture (`num_nextn_predict_layers` set to `mtp`) whose checkpoint
/// has `name` as a zero bf16 tensor of `shape`, replacing the one of that name if any.
fn with_tensor(mtp: u64, name: &str, shape: &[usize]) -> tempfile::TempDir {
    let d = with_config("deepseek_v3", "num_nextn_predict_layers", mtp.into());
    set_tensor(d.path(), name, Some(shape));
    d
}

const ATTN: &str = "model.layers.0.self_attn.";

#[test]
fn the_fixtures_pass() {
    for family in ["deepseek_v3", "deepseek_v3_nolora"] {
        let (code, err) = check(&fixture(family));
        assert_eq!(code, Some(0), "{family}: {err}");
    }
}

#[test]
fn ranks_the_projections_do_not_have() {
    let d = with_config("deepseek_v3", "q_lora_rank", 32.into());
    refused(d.path(), &[&format!("{ATTN}q_a_proj.weight"), "expected [32, 64]", "[48, 64]"]);
    let d = with_config("deepseek_v3", "kv_lora_rank", 16.into());
    refused(d.path(), &[&format!("{ATTN}kv_a_proj_with_mqa.weight"), "expected [32, 64]", "[48, 64]"]);
    // A low-rank query the config does not announce: q_proj is missing.
    let d = with_config("deepseek_v3", "q_lora_rank", serde_json::Value::Null);
    refused(d.path(), &[&format!("{ATTN}q_proj.weight"), "missing"]);
    let d = with_config("deepseek_v3_nolora", "q_lora_rank", 48.into());
    refused(d.path(), &[&format!("{ATTN}q_a_proj.weight"), "missing"]);
}

#[test]
fn head_widths_the_projections_do_not_have() {
    // 4 heads of (nope + rope) query rows, then (nope + v) rows of kv_b_proj per head.
    let d = with_config("deepseek_v3", "qk_nope_head_dim", 16.into());
    refused(d.path(), &[&format!("{ATTN}q_b_proj.weight"), "expected [128, 48]", "[160, 48]"]);
    let d = with_config("deepseek_v3", "qk_rope_head_dim", 8.into());
    refused(d.path(), &[&format!("{ATTN}q_b_proj.weight"), "expected [128, 48]", "[160, 48]"]);
    let d = with_config("deepseek_v3_nolora", "qk_rope_head_dim", 8.into());
    refused(d.path(), &[&format!("{ATTN}q_proj.weight"), "expected [128, 64]", "[160, 64]"]);
    let d = with_config("deepseek_v3", "v_head_dim", 16.into());
    refused(d.path(), &[&format!("{ATTN}kv_b_proj.weight"), "expected [160, 32]", "[176, 32]"]);
}

#[test]
fn latent_norms_and_router_bias_of_other_widths() {
    let name = format!("{ATTN}kv_a_layernorm.weight");
    refused(with_tensor(0, &name, &[24]).path(), &[&name, "expected [32]", "[24]"]);
    let name = format!("{ATTN}q_a_layernorm.weight");
    refused(with_tensor(0, &name, &[32]).path(), &[&name, "expected [48]", "[32]"]);
    let name = "model.layers.1.mlp.gate.e_score_correction_bias";
    refused(with_tensor(0, name, &[6]).path(), &[name, "expected [8]", "[6]"]);
}

#[test]
fn mtp_layers_the_config_names_are_left_unread_and_others_refused() {
    let name = "model.layers.3.eh_proj.weight";
    let (code, err) = check(with_tensor(1, name, &[64, 128]).path());
    assert_eq!(code, Some(0), "{err}");
    refused(with_tensor(0, name, &[64, 128]).path(), &["does not use", name]);
}
