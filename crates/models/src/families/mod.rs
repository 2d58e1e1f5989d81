//! One file per model family: how its config maps onto the shared decoder's [`ModelSpec`].

pub mod deepseek_v3;
pub mod gemma2;
pub mod gemma3;
pub mod gemma4;
pub mod glm4_moe;
pub mod glm_moe_dsa;
pub mod gpt_oss;
pub mod lfm2;
pub mod lfm2_moe;
pub mod lfm3;
pub mod llama;
pub mod minimax_m2;
pub mod minimax_m3;
pub mod mistral;
pub mod nemotron_h;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_5;
pub mod qwen3_5_moe;
pub mod qwen3_moe;
pub mod qwen3_next;
pub mod step3p7;
