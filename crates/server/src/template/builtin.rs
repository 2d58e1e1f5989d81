//! The named chat templates `--chat-template NAME` offers, written for TensorFold to render as
//! the families' own Hugging Face templates do (same special-token layout and BOS handling).

/// A built-in chat template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// The name `--chat-template` takes.
    pub name: &'static str,
    /// The Jinja source.
    pub source: &'static str,
    /// The text of the control token that ends an assistant turn (`None`: the model's EOS does).
    pub end_of_turn: Option<&'static str>,
}

/// Every built-in, by name.
pub const BUILTINS: &[Builtin] = &[
    Builtin { name: "chatml", source: include_str!("chatml.jinja"), end_of_turn: Some("<|im_end|>") },
    Builtin { name: "gemma", source: include_str!("gemma.jinja"), end_of_turn: Some("<end_of_turn>") },
    Builtin { name: "llama2", source: include_str!("llama2.jinja"), end_of_turn: None },
    Builtin { name: "llama3", source: include_str!("llama3.jinja"), end_of_turn: Some("<|eot_id|>") },
    Builtin { name: "qwen3", source: include_str!("qwen3.jinja"), end_of_turn: Some("<|im_end|>") },
];

/// The built-in called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The built-ins' names, comma-separated (for messages).
pub fn builtin_names() -> String {
    BUILTINS.iter().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

/// The usual template of a family (`architectures[0]`); `has_token` says whether the vocabulary
/// holds a token's text (a Llama vocabulary without `<|start_header_id|>` is Llama 2's).
pub fn family_builtin(architecture: &str, has_token: &dyn Fn(&str) -> bool) -> Option<&'static Builtin> {
    let name = match architecture {
        "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => "gemma",
        "LlamaForCausalLM" if has_token("<|start_header_id|>") => "llama3",
        "LlamaForCausalLM" => "llama2",
        "Qwen3ForCausalLM" | "Qwen3MoeForCausalLM" => "chatml",
        _ => return None,
    };
    builtin(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{ChatTemplate, TemplateInput};
    use minijinja::Value;

    const CHAT: &str = r#"[{"role":"system","content":"Be brief."},{"role":"user","content":" Hi "},
        {"role":"assistant","content":"Hello!"},{"role":"user","content":"How are you?"}]"#;

    fn render(name: &str, bos: &str, eos: &str, json: &str, extra: Vec<(String, Value)>) -> Result<String, String> {
        let t = ChatTemplate::new(builtin(name).unwrap().source, Some(bos), Some(eos)).map_err(|e| e.to_string())?;
        let messages: Value = serde_json::from_str(json).unwrap();
        let input = TemplateInput { messages, tools: None, add_generation_prompt: true, extra };
        t.render(input).map_err(|e| e.to_string())
    }

    #[test]
    fn gemma_renders_as_the_gemma3_template() {
        let want = "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n\
                    <start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n";
        assert_eq!(render("gemma", "<bos>", "<eos>", CHAT, vec![]).unwrap(), want);
        let one = r#"[{"role":"user","content":"Hi"}]"#;
        assert_eq!(
            render("gemma", "<bos>", "<eos>", one, vec![]).unwrap(),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        let twice = r#"[{"role":"user","content":"a"},{"role":"user","content":"b"}]"#;
        assert!(render("gemma", "<bos>", "<eos>", twice, vec![]).unwrap_err().contains("alternate"));
    }

    #[test]
    fn chatml_and_qwen3_render_im_start_turns() {
        let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n\
                    <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n\
                    <|im_start|>assistant\n";
        assert_eq!(render("chatml", "", "<|im_end|>", CHAT, vec![]).unwrap(), want);
        let thought = CHAT.replace("Hello!", "<think>\\nhm\\n</think>\\n\\nHello!");
        assert_eq!(render("qwen3", "", "<|im_end|>", &thought, vec![]).unwrap(), want);
        let off = vec![("enable_thinking".to_string(), Value::from(false))];
        assert_eq!(render("qwen3", "", "", CHAT, off).unwrap(), format!("{want}<think>\n\n</think>\n\n"));
        let on = vec![("enable_thinking".to_string(), Value::from(true))];
        assert_eq!(render("qwen3", "", "", CHAT, on).unwrap(), want);
    }

    #[test]
    fn llama_templates_render_their_headers_and_inst_blocks() {
        let want = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
                    <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
                    <|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>\
                    <|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>\
                    <|start_header_id|>assistant<|end_header_id|>\n\n";
        assert_eq!(render("llama3", "<|begin_of_text|>", "<|eot_id|>", CHAT, vec![]).unwrap(), want);
        let want = "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello! </s><s>[INST] How are you? [/INST]";
        assert_eq!(render("llama2", "<s>", "</s>", CHAT, vec![]).unwrap(), want);
    }

    #[test]
    fn built_ins_refuse_tools_and_null_content_renders_empty() {
        for b in BUILTINS {
            let t = ChatTemplate::new(b.source, Some("<s>"), Some("</s>")).unwrap();
            let messages: Value = serde_json::from_str(r#"[{"role":"user","content":null}]"#).unwrap();
            let input =
                TemplateInput { messages: messages.clone(), tools: None, add_generation_prompt: true, extra: vec![] };
            assert!(t.render(input).is_ok(), "{}", b.name);
            let tools = Some(serde_json::from_str(r#"[{"type":"function"}]"#).unwrap());
            let input = TemplateInput { messages, tools, add_generation_prompt: true, extra: vec![] };
            assert!(t.render(input).unwrap_err().to_string().contains("no tools"), "{}", b.name);
        }
    }
}
