//! Hugging Face architecture names to family spec builders.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::families;
use crate::spec::ModelSpec;

type SpecFn = fn(&RawConfig, &str) -> Result<ModelSpec, ModelError>;

/// Every supported `architectures[0]` (and `model_type`) with its family.
const FAMILIES: &[(&str, SpecFn)] = &[
    ("LlamaForCausalLM", families::llama::spec),
    ("llama", families::llama::spec),
    ("Qwen2ForCausalLM", families::qwen2::spec),
    ("qwen2", families::qwen2::spec),
    ("MistralForCausalLM", families::mistral::spec),
    ("Phi3ForCausalLM", families::phi3::spec),
    ("phi3", families::phi3::spec),
    ("GptOssForCausalLM", families::gpt_oss::spec),
    ("gpt_oss", families::gpt_oss::spec),
    ("mistral", families::mistral::spec),
    ("Qwen3ForCausalLM", families::qwen3::spec),
    ("qwen3", families::qwen3::spec),
    ("Gemma2ForCausalLM", families::gemma2::spec),
    ("gemma2", families::gemma2::spec),
    ("Gemma3ForCausalLM", families::gemma3::spec),
    ("gemma3_text", families::gemma3::spec),
    ("Gemma4ForCausalLM", families::gemma4::spec),
    ("gemma4_text", families::gemma4::spec),
    ("Qwen3MoeForCausalLM", families::qwen3_moe::spec),
    ("qwen3_moe", families::qwen3_moe::spec),
    ("NemotronHForCausalLM", families::nemotron_h::spec),
    ("nemotron_h", families::nemotron_h::spec),
    ("Glm4MoeForCausalLM", families::glm4_moe::spec),
    ("glm4_moe", families::glm4_moe::spec),
    ("DeepseekV3ForCausalLM", families::deepseek_v3::spec),
    ("deepseek_v3", families::deepseek_v3::spec),
    ("GlmMoeDsaForCausalLM", families::glm_moe_dsa::spec),
    ("glm_moe_dsa", families::glm_moe_dsa::spec),
    ("DeepseekV32ForCausalLM", families::glm_moe_dsa::spec),
    ("deepseek_v32", families::glm_moe_dsa::spec),
    ("Lfm2ForCausalLM", families::lfm2::spec),
    ("lfm2", families::lfm2::spec),
    ("Lfm3ForCausalLM", families::lfm3::spec),
    ("lfm3", families::lfm3::spec),
    ("Lfm2MoeForCausalLM", families::lfm2_moe::spec),
    ("lfm2_moe", families::lfm2_moe::spec),
    ("Qwen3_5ForCausalLM", families::qwen3_5::spec),
    ("qwen3_5_text", families::qwen3_5::spec),
    ("Qwen3_5MoeForCausalLM", families::qwen3_5_moe::spec),
    ("qwen3_5_moe_text", families::qwen3_5_moe::spec),
    ("MiniMaxM2ForCausalLM", families::minimax_m2::spec),
    ("minimax_m2", families::minimax_m2::spec),
    ("Qwen3NextForCausalLM", families::qwen3_next::spec),
    ("qwen3_next", families::qwen3_next::spec),
    ("MiniMaxM3SparseForConditionalGeneration", families::minimax_m3::spec),
    ("minimax_m3_vl", families::minimax_m3::spec),
    ("Step3p7ForConditionalGeneration", families::step3p7::spec),
    ("step3p7", families::step3p7::spec),
    ("Step3p5ForCausalLM", families::step3p7::spec),
    ("step3p5", families::step3p7::spec),
];

/// Multimodal wrappers whose text model runs from their `text_config` (the vision tower's
/// tensors left unread; the server takes no images).
const TEXT_OF: &[&str] = &["MiniMaxM3SparseForConditionalGeneration", "minimax_m3_vl"];

/// The config the spec is built from: a multimodal wrapper's text part
/// ([`RawConfig::text_part`]), any other config as it is.
pub fn text_config(config: RawConfig) -> RawConfig {
    match config.architecture().is_some_and(|a| TEXT_OF.contains(&a)) {
        true => config.text_part(),
        false => config,
    }
}

/// The spec for the architecture `config` names.
pub fn spec_for(config: &RawConfig) -> Result<ModelSpec, ModelError> {
    let arch = config.architecture().ok_or_else(|| config.error("names no architectures or model_type"))?;
    let (_, build) = FAMILIES.iter().find(|(name, _)| *name == arch).ok_or_else(|| ModelError::Architecture {
        file: config.file.clone(),
        arch: arch.to_string(),
        supported: FAMILIES.iter().map(|f| f.0).filter(|n| n.contains("For")).collect::<Vec<_>>().join(", "),
    })?;
    build(config, arch)
}
