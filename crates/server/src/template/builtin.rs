//! The named chat templates `--chat-template NAME` offers, written for TensorFold to render as
//! the families' own Hugging Face templates do (same special-token layout and BOS handling),
//! tools included: Hermes blocks (`hermes.jinja`'s macros) for chatml, qwen3, gemma and llama2,
//! Llama 3.1's JSON calls for llama3.

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
    Builtin {
        name: "chatml",
        source: concat!(include_str!("hermes.jinja"), include_str!("chatml.jinja")),
        end_of_turn: Some("<|im_end|>"),
    },
    Builtin {
        name: "gemma",
        source: concat!(include_str!("hermes.jinja"), include_str!("gemma.jinja")),
        end_of_turn: Some("<end_of_turn>"),
    },
    Builtin {
        name: "llama2",
        source: concat!(include_str!("hermes.jinja"), include_str!("llama2.jinja")),
        end_of_turn: None,
    },
    Builtin { name: "llama3", source: include_str!("llama3.jinja"), end_of_turn: Some("<|eot_id|>") },
    Builtin {
        name: "qwen3",
        source: concat!(include_str!("hermes.jinja"), include_str!("qwen3.jinja")),
        end_of_turn: Some("<|im_end|>"),
    },
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
        render_tools(name, bos, eos, json, None, extra)
    }

    fn render_tools(
        name: &str,
        bos: &str,
        eos: &str,
        json: &str,
        tools: Option<&str>,
        extra: Vec<(String, Value)>,
    ) -> Result<String, String> {
        let t = ChatTemplate::new(builtin(name).unwrap().source, Some(bos), Some(eos)).map_err(|e| e.to_string())?;
        let messages: Value = serde_json::from_str(json).unwrap();
        let tools = tools.map(|t| serde_json::from_str(t).unwrap());
        let input = TemplateInput { messages, tools, add_generation_prompt: true, extra };
        t.render(input).map_err(|e| e.to_string())
    }

    const TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]"#;

    /// A system message, a question, two calls (arguments as text and as an object), two results.
    const TOOL_CHAT: &str = r#"[{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "9C"}]"#;

    const HERMES_TOOLS: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
        You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
        {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \
        \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n\
        For each function call, return a json object with function name and arguments within \
        <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

    const HERMES_CALLS: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
        <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";

    const HERMES_RESULTS: &str = "<tool_response>\n18C\n</tool_response>\n<tool_response>\n9C\n</tool_response>";

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
    fn qwen3_and_chatml_render_tools_as_the_qwen3_template() {
        let want = format!(
            "<|im_start|>system\nBe brief.\n\n{HERMES_TOOLS}<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n\
             <|im_start|>assistant\nChecking.\n{HERMES_CALLS}<|im_end|>\n<|im_start|>user\n{HERMES_RESULTS}<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert_eq!(render_tools("qwen3", "", "", TOOL_CHAT, Some(TOOLS), vec![]).unwrap(), want);
        assert_eq!(render_tools("chatml", "", "", TOOL_CHAT, Some(TOOLS), vec![]).unwrap(), want);
        // After the last user query Qwen3 keeps an answer's reasoning; without tools the calls
        // and results still render.
        let chat = TOOL_CHAT.replace("\"Checking.\"", "\"<think>\\nhm\\n</think>\\n\\nChecking.\"");
        let want = format!(
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n\
             <|im_start|>assistant\n<think>\nhm\n</think>\n\nChecking.\n{HERMES_CALLS}<|im_end|>\n\
             <|im_start|>user\n{HERMES_RESULTS}<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(render_tools("qwen3", "", "", &chat, None, vec![]).unwrap(), want);
    }

    #[test]
    fn gemma_and_llama2_render_hermes_tools_in_their_turns() {
        let want = format!(
            "<bos><start_of_turn>user\nBe brief.\n\n{HERMES_TOOLS}\n\nWeather in Paris?<end_of_turn>\n\
             <start_of_turn>model\nChecking.\n{HERMES_CALLS}<end_of_turn>\n\
             <start_of_turn>user\n{HERMES_RESULTS}<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(render_tools("gemma", "<bos>", "<eos>", TOOL_CHAT, Some(TOOLS), vec![]).unwrap(), want);
        let want = format!(
            "<s>[INST] <<SYS>>\nBe brief.\n\n{HERMES_TOOLS}\n<</SYS>>\n\nWeather in Paris? [/INST] \
             Checking.\n{HERMES_CALLS} </s><s>[INST] {HERMES_RESULTS} [/INST]"
        );
        assert_eq!(render_tools("llama2", "<s>", "</s>", TOOL_CHAT, Some(TOOLS), vec![]).unwrap(), want);
        let answer_twice =
            r#"[{"role":"user","content":"a"},{"role":"tool","content":"r"},{"role":"user","content":"b"}]"#;
        for name in ["gemma", "llama2"] {
            let err = render_tools(name, "<s>", "</s>", answer_twice, Some(TOOLS), vec![]).unwrap_err();
            assert!(err.contains("alternate"), "{name}: {err}");
        }
    }

    #[test]
    fn llama3_renders_tools_as_the_llama31_template() {
        let listing = "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and \
                       its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \
                       \"name\": \"get_weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \
                       \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                \
                       }\n            }\n        }\n    }\n}\n\n";
        let head = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n\
                    Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
        let rest = "<|start_header_id|>assistant<|end_header_id|>\n\n[{\"name\": \"get_weather\", \"parameters\": \
                    {\"city\": \"Paris\"}}, {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}]<|eot_id|>\
                    <|start_header_id|>ipython<|end_header_id|>\n\n18C<|eot_id|>\
                    <|start_header_id|>ipython<|end_header_id|>\n\n9C<|eot_id|>\
                    <|start_header_id|>assistant<|end_header_id|>\n\n";
        let want = format!(
            "{head}Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, \
             please respond with a JSON for a function call with its proper arguments that best answers the given \
             prompt.\n\n{listing}Weather in Paris?<|eot_id|>{rest}"
        );
        let render = |extra| render_tools("llama3", "<|begin_of_text|>", "<|eot_id|>", TOOL_CHAT, Some(TOOLS), extra);
        assert_eq!(render(vec![]).unwrap(), want);
        let in_system = vec![("tools_in_user_message".to_string(), Value::from(false))];
        let want = format!(
            "{head}You have access to the following functions. To call a function, please respond with JSON for a \
             function call.{listing}Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n\
             Weather in Paris?<|eot_id|>{rest}"
        );
        assert_eq!(render(in_system).unwrap(), want);
    }

    #[test]
    fn built_ins_render_tools_and_null_content_renders_empty() {
        for b in BUILTINS {
            let t = ChatTemplate::new(b.source, Some("<s>"), Some("</s>")).unwrap();
            let messages: Value = serde_json::from_str(r#"[{"role":"user","content":null}]"#).unwrap();
            let input =
                TemplateInput { messages: messages.clone(), tools: None, add_generation_prompt: true, extra: vec![] };
            let plain = t.render(input).unwrap();
            let tools = Some(serde_json::from_str(TOOLS).unwrap());
            let input = TemplateInput { messages, tools, add_generation_prompt: true, extra: vec![] };
            let with_tools = t.render(input).unwrap();
            assert!(!plain.contains("get_weather") && with_tools.contains("\"name\": \"get_weather\""), "{}", b.name);
        }
    }
}
