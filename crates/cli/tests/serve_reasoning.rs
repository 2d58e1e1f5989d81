//! `serve --reasoning-parser`: a chat answer's reasoning split into `reasoning_content`, whole
//! and streamed, the answer after it in `content` (a continued final message read from where
//! its text left off); off by default (the text as generated), and an unknown parser refused at
//! start. The tiny model's output is forced with `guided_choice`.

mod serve_util;

use serde_json::{Value, json};
use serve_util::Server;
use std::process::Command;

/// The forced answer: a Qwen3-style think block, then the answer.
const FORCED: &str = "<think>\nsum it\n</think>\n\nIt is 4.";

fn chat(stream: bool) -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "2 + 2?"}], "max_tokens": 64,
           "guided_choice": [FORCED], "stream": stream})
}

/// A stream's reasoning and content deltas, each joined.
fn joined(events: &[Value]) -> (String, String) {
    let field = |name: &str| -> String {
        events
            .iter()
            .filter_map(|e| e["choices"][0]["delta"][name].as_str().map(str::to_string))
            .collect::<Vec<_>>()
            .concat()
    };
    (field("reasoning_content"), field("content"))
}

#[test]
fn reasoning_is_split_off_chat_answers_whole_and_streamed() {
    for parser in ["qwen3", "deepseek_r1"] {
        let s = Server::start(&["--reasoning-parser", parser]);
        let r = s.post("/v1/chat/completions", &chat(false));
        assert_eq!(r.status, 200, "{}", r.text());
        let message = &r.json()["choices"][0]["message"];
        assert_eq!(message["reasoning_content"], "\nsum it\n", "{parser}: {message}");
        assert_eq!(message["content"], "It is 4.", "{parser}: {message}");
        // The reasoning's tokens: those before "It is 4." (which takes several of its own).
        let usage = &r.json()["usage"];
        let (thought, all) = (&usage["completion_tokens_details"]["reasoning_tokens"], &usage["completion_tokens"]);
        assert!(thought.as_u64() > Some(4) && thought.as_u64() < Some(all.as_u64().unwrap() - 3), "{usage}");
        let events = s.post("/v1/chat/completions", &chat(true)).events();
        assert_eq!(joined(&events), ("\nsum it\n".into(), "It is 4.".into()), "{parser}: streamed");
        // Completions are text as generated.
        let body = json!({"model": "tiny", "prompt": "2 + 2?", "max_tokens": 64, "guided_choice": [FORCED]});
        assert_eq!(s.post("/v1/completions", &body).json()["choices"][0]["text"], FORCED);
    }
    let s = Server::start(&[]);
    let doc = s.post("/v1/chat/completions", &chat(false)).json();
    let message = &doc["choices"][0]["message"];
    assert_eq!(message["content"], FORCED, "no parser: the text as generated");
    assert!(message.get("reasoning_content").is_none(), "{message}");
    assert!(doc["usage"].get("completion_tokens_details").is_none(), "{doc}");
    // An answer without reasoning has none of its tokens.
    let s = Server::start(&["--reasoning-parser", "qwen3"]);
    let mut plain = chat(false);
    plain["guided_choice"] = json!(["It is 4."]);
    let usage = s.post("/v1/chat/completions", &plain).json()["usage"].clone();
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0, "{usage}");
}

/// A final assistant message left open (`continue_final_message`) inside its `<think>` block:
/// the continuation is reasoning up to `</think>`; left open after the block, it is answer.
#[test]
fn a_continued_message_is_read_from_where_its_prefill_left_off() {
    let s = Server::start(&["--reasoning-parser", "qwen3"]);
    let continued = |prefill: &str, forced: &str| -> Value {
        let body = json!({"model": "tiny", "max_tokens": 64, "guided_choice": [forced],
            "messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": prefill}],
            "continue_final_message": true, "add_generation_prompt": false});
        let r = s.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["choices"][0]["message"].clone()
    };
    let inside = continued("<think>\nsum", " it\n</think>\n\nIt is 4.");
    assert_eq!((&inside["reasoning_content"], &inside["content"]), (&json!(" it\n"), &json!("It is 4.")), "{inside}");
    let after = continued("<think>\nsum it\n</think>\n\nIt is", " 4.");
    assert_eq!(after["content"], " 4.", "{after}");
    assert!(after.get("reasoning_content").is_none_or(Value::is_null), "{after}");
}

/// gpt-oss's harmony parser: structured output under it is refused with 400 naming it (its
/// grammar would start after the `final` channel's header).
#[test]
fn structured_output_under_the_harmony_parser_is_refused() {
    let s = Server::start(&["--reasoning-parser", "gpt_oss"]);
    let r = s.post("/v1/chat/completions", &chat(false));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("--reasoning-parser gpt_oss") && r.text().contains("response_format"), "{}", r.text());
    let plain = json!({"model": "tiny", "messages": [{"role": "user", "content": "2 + 2?"}], "max_tokens": 4});
    assert_eq!(s.post("/v1/chat/completions", &plain).status, 200);
}

#[test]
fn an_unknown_reasoning_parser_is_refused_at_start() {
    let dir = serve_util::model_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["serve", "--model", dir.path().to_str().expect("utf-8"), "--port", "0", "--reasoning-parser", "r2"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--reasoning-parser r2: known parsers are qwen3, deepseek_r1 and gpt_oss"), "{err}");
}

#[test]
fn tool_calls_are_parsed_from_the_answer_after_the_reasoning() {
    let s = Server::start(&["--reasoning-parser", "qwen3"]);
    let call = r#"<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call>"#;
    let forced = format!("<think>\nneed the weather\n</think>\n\n{call}");
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let body = |stream: bool| {
        json!({"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools,
               "max_tokens": 200, "guided_choice": [forced], "stream": stream})
    };
    let doc = s.post("/v1/chat/completions", &body(false)).json();
    let choice = &doc["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{doc}");
    assert_eq!(choice["message"]["reasoning_content"], "\nneed the weather\n", "{doc}");
    assert_eq!(choice["message"]["content"], Value::Null, "{doc}");
    assert_eq!(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather", "{doc}");
    let events = s.post("/v1/chat/completions", &body(true)).events();
    assert_eq!(joined(&events), ("\nneed the weather\n".into(), String::new()), "streamed: the reasoning only");
    let calls: Vec<&Value> = events.iter().filter_map(|e| e["choices"][0]["delta"]["tool_calls"].get(0)).collect();
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"city":"Paris"}"#);
    assert!(events.iter().any(|e| e["choices"][0]["finish_reason"] == "tool_calls"), "{events:?}");
}

/// The Responses API: a `reasoning` item before the message, whole and streamed (its text
/// forced through a JSON string schema, so the tags sit inside quotes: R1's rule splits it).
#[test]
fn responses_carry_a_reasoning_item_before_the_message() {
    let s = Server::start(&["--reasoning-parser", "deepseek_r1"]);
    let body = |stream: bool| {
        json!({"model": "tiny", "input": "2 + 2?", "max_output_tokens": 64, "stream": stream,
               "text": {"format": {"type": "json_schema", "name": "a", "schema": {"enum": ["x</think>y"]}}}})
    };
    let r = s.post("/v1/responses", &body(false));
    assert_eq!(r.status, 200, "{}", r.text());
    let out = r.json()["output"].clone();
    assert_eq!(out[0]["type"], "reasoning", "{out}");
    assert_eq!(out[0]["content"][0], json!({"type": "reasoning_text", "text": "\"x"}), "{out}");
    assert_eq!(out[1]["type"], "message", "{out}");
    assert_eq!(out[1]["content"][0]["text"], "y\"", "{out}");
    let usage = r.json()["usage"].clone();
    assert!(usage["output_tokens_details"]["reasoning_tokens"].as_u64() > Some(0), "{usage}");
    // `event: KIND` then `data: {...}` per event.
    let text = s.post("/v1/responses", &body(true)).text();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).expect("an event's JSON"))
        .collect();
    let joined = |kind: &str| -> String {
        let of_kind = events.iter().filter(|e| e["type"] == kind);
        of_kind.map(|e| e["delta"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().concat()
    };
    assert_eq!(joined("response.reasoning_text.delta"), "\"x", "{events:?}");
    assert_eq!(joined("response.output_text.delta"), "y\"", "{events:?}");
    let deltas = events.iter().filter(|e| e["type"] == "response.output_text.delta");
    assert!(deltas.clone().all(|e| e["output_index"] == 1), "the message is the second item: {events:?}");
    let done = events.iter().find(|e| e["type"] == "response.completed").expect("completed");
    // The same items but for their ids (each response has its own).
    let without_ids = |items: &Value| -> Vec<Value> {
        let mut items = items.as_array().cloned().unwrap_or_default();
        items.iter_mut().for_each(|i| i["id"] = Value::Null);
        items
    };
    assert_eq!(without_ids(&done["response"]["output"]), without_ids(&out), "the streamed response's items");
}

/// The fixture with `<think>` (480) and `</think>` (481) as tokens of their own (as Qwen3's
/// tokenizer has them), and `template` as its chat template.
fn thinking_model(template: &str) -> tempfile::TempDir {
    let dir = serve_util::model_dir();
    let path = dir.path().join("tokenizer.json");
    let mut tok: Value = serde_json::from_slice(&std::fs::read(&path).expect("tokenizer")).expect("json");
    let Some(added) = tok["added_tokens"].as_array_mut() else { panic!("added tokens") };
    for (id, content) in [(480, "<think>"), (481, "</think>")] {
        added.push(json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
                          "normalized": false, "special": false}));
    }
    std::fs::write(&path, tok.to_string()).expect("written");
    std::fs::write(dir.path().join("chat_template.jinja"), template).expect("written");
    dir
}

/// A chat asking for `"yes"` by schema, its output steered by `bias`.
fn steered(bias: Value) -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "ok?"}], "max_tokens": 12,
           "logit_bias": bias, "response_format": {"type": "json_schema",
           "json_schema": {"name": "a", "schema": {"enum": ["yes"]}}}})
}

/// With a reasoning parser, structured output holds on the answer alone: the reasoning is free
/// (here `<think></think>`, steered by logit_bias past what the schema allows), the answer
/// after `</think>` matches the schema; an output that does not open `<think>` is held to it
/// from its first token.
#[test]
fn structured_output_holds_after_the_reasoning() {
    let s = Server::start_in(thinking_model(serve_util::CHATML), &["--reasoning-parser", "qwen3"]);
    // `<think>` outranks every other first token, `</think>` everything after it.
    let doc = s.post("/v1/chat/completions", &steered(json!({"480": 50, "481": 100}))).json();
    let message = &doc["choices"][0]["message"];
    assert_eq!((&message["reasoning_content"], &message["content"]), (&json!(""), &json!("\"yes\"")), "{doc}");
    assert_eq!(doc["choices"][0]["finish_reason"], "stop", "{doc}");
    assert_eq!(doc["usage"]["completion_tokens_details"]["reasoning_tokens"], 2, "{doc}");
    // No `<think>`: the schema from the first token.
    let doc = s.post("/v1/chat/completions", &steered(json!({"480": -100}))).json();
    assert_eq!(doc["choices"][0]["message"]["content"], "\"yes\"", "{doc}");
    assert!(doc["choices"][0]["message"].get("reasoning_content").is_none(), "{doc}");
    // The same through the Responses API.
    let body = json!({"model": "tiny", "input": "ok?", "max_output_tokens": 12, "logit_bias": {"480": 50, "481": 100},
                      "text": {"format": {"type": "json_schema", "name": "a", "schema": {"enum": ["yes"]}}}});
    let r = s.post("/v1/responses", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let out = r.json()["output"].clone();
    assert_eq!((&out[0]["type"], &out[1]["content"][0]["text"]), (&json!("reasoning"), &json!("\"yes\"")), "{out}");
    // Without a parser, the schema holds on the whole output: `<think>` cannot open it.
    let s = Server::start_in(thinking_model(serve_util::CHATML), &[]);
    let doc = s.post("/v1/chat/completions", &steered(json!({"480": 50, "481": 100}))).json();
    assert_eq!(doc["choices"][0]["message"]["content"], "\"yes\"", "{doc}");
}

/// DeepSeek R1's outputs open in their reasoning, so the schema holds after `</think>`; where
/// the template already closed the reasoning (thinking off), the output is all answer, held to
/// the schema from its first token.
#[test]
fn deepseek_r1_reasoning_ends_at_think_close_or_in_the_prompt() {
    let s = Server::start_in(thinking_model(serve_util::CHATML), &["--reasoning-parser", "deepseek_r1"]);
    let doc = s.post("/v1/chat/completions", &steered(json!({"481": 100}))).json();
    let message = &doc["choices"][0]["message"];
    assert_eq!((&message["reasoning_content"], &message["content"]), (&json!(""), &json!("\"yes\"")), "{doc}");
    let closed = serve_util::CHATML.replace("assistant\\n' }}", "assistant\\n<think>\\n\\n</think>\\n\\n' }}");
    assert_ne!(closed, serve_util::CHATML);
    let s = Server::start_in(thinking_model(&closed), &["--reasoning-parser", "deepseek_r1"]);
    let doc = s.post("/v1/chat/completions", &steered(json!({"480": -100}))).json();
    let message = &doc["choices"][0]["message"];
    assert_eq!(message["content"], "\"yes\"", "{doc}");
    assert!(message.get("reasoning_content").is_none(), "thinking off: no reasoning: {doc}");
    assert_eq!(doc["usage"]["completion_tokens_details"]["reasoning_tokens"], 0, "{doc}");
}
