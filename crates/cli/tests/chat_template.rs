//! `serve`'s chat template choice, end to end: `--chat-template NAME|FILE` wins over the
//! checkpoint's own, a checkpoint without one gets its family's usual template with a warning
//! on stderr, and unknown names, unreadable files and broken templates exit 2 before serving;
//! a built-in renders `tools`, so a model without its own template calls tools; a request's
//! `reasoning_effort` reaches a template that reads it.
//! The ids `/tokenize` returns for a chat show which template rendered it (the fixture's
//! vocabulary has `<bos>` = 1, `<|im_start|>` = 3, `<|im_end|>` = 4 and no Gemma turn tokens).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A copy of the qwen3 fixture (which has no chat template), with `template` as its own.
fn model_dir(template: Option<&str>) -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_name().to_string_lossy().starts_with("golden") {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    if let Some(t) = template {
        std::fs::write(dir.path().join("chat_template.jinja"), t).unwrap();
    }
    dir
}

fn serve_args<'a>(dir: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["serve", "--model", dir.to_str().unwrap(), "--port", "0", "--threads", "1"];
    args.extend_from_slice(&["--device", "cpu", "--kv-memory", "4MiB", "--served-model-name", "tiny"]);
    args.extend_from_slice(extra);
    args
}

/// A running server, its address and what it wrote on stderr before listening; killed on drop.
struct Served {
    child: Child,
    addr: String,
    stderr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(serve_args(dir, extra))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let (etx, erx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = etx.send(line);
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).expect("the server printed no address");
    // The startup lines come before the address; give the pipe a moment to deliver them.
    std::thread::sleep(Duration::from_millis(200));
    let stderr = erx.try_iter().collect::<Vec<_>>().join("\n");
    Served { child, addr, stderr }
}

/// POSTs JSON and returns (status, body).
fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let text = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(text).unwrap_or(Value::Null))
}

/// The ids of a one-message chat as the server renders and tokenizes it.
fn chat_ids(s: &Served) -> Vec<u64> {
    let (status, doc) = post(&s.addr, "/tokenize", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(status, 200, "{doc}");
    doc["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
}

fn refused(dir: &Path, extra: &[&str]) -> String {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(serve_args(dir, extra)).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_checkpoint_without_a_template_gets_its_familys_with_a_warning_and_chats() {
    let dir = model_dir(None);
    let s = serve(dir.path(), &[]);
    assert!(s.stderr.contains("no chat template") && s.stderr.contains("built-in chatml"), "{}", s.stderr);
    let ids = chat_ids(&s);
    assert_eq!(ids.first(), Some(&3), "ChatML opens with <|im_start|>: {ids:?}");
    assert_eq!(ids.iter().filter(|&&i| i == 4).count(), 1, "one <|im_end|>: {ids:?}");
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
    let (status, doc) = post(&s.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{doc}");
    assert!(doc["choices"][0]["message"]["content"].is_string(), "{doc}");
}

#[test]
fn the_switch_wins_over_the_checkpoints_own_template() {
    let dir = model_dir(Some("OWN {{ messages[0]['content'] }}"));
    let own = serve(dir.path(), &[]);
    let own_ids = chat_ids(&own);
    assert!(!own_ids.contains(&3) && !own.stderr.contains("no chat template"), "{own_ids:?} {}", own.stderr);
    drop(own);

    let switched = serve(dir.path(), &["--chat-template", "chatml"]);
    assert_eq!(chat_ids(&switched).first(), Some(&3));
    assert!(!switched.stderr.contains("no chat template"), "{}", switched.stderr);
    drop(switched);

    // Gemma's BOS comes from the template; its turn tokens are not in this vocabulary.
    let gemma = serve(dir.path(), &["--chat-template", "gemma"]);
    let ids = chat_ids(&gemma);
    assert_eq!(ids.first(), Some(&1), "{ids:?}");
    assert!(!ids.contains(&3) && !ids.contains(&4), "{ids:?}");
    assert!(gemma.stderr.contains("no <end_of_turn> token"), "{}", gemma.stderr);
    drop(gemma);

    let file = dir.path().join("mine.jinja");
    std::fs::write(&file, "{{ bos_token }}FILE {{ messages[0]['content'] }}").unwrap();
    let from_file = serve(dir.path(), &["--chat-template", file.to_str().unwrap()]);
    assert_eq!(chat_ids(&from_file).first(), Some(&1));
}

#[test]
fn unknown_names_unreadable_files_and_broken_templates_exit_2() {
    let dir = model_dir(None);
    let msg = refused(dir.path(), &["--chat-template", "chatml3"]);
    assert!(msg.contains("--chat-template chatml3: not a built-in template (chatml, gemma"), "{msg}");
    assert!(msg.contains("no such file or directory"), "{msg}");
    let broken = dir.path().join("broken.jinja");
    std::fs::write(&broken, "{% for m in messages %}").unwrap();
    let msg = refused(dir.path(), &["--chat-template", broken.to_str().unwrap()]);
    assert!(msg.contains("does not compile"), "{msg}");
}

#[test]
fn a_builtin_template_renders_tools_and_a_required_choice_returns_calls() {
    let dir = model_dir(None);
    // The tool instructions alone pass the fixture's 256 positions in its small vocabulary.
    let config = dir.path().join("config.json");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    doc["max_position_embeddings"] = json!(1024);
    std::fs::write(&config, doc.to_string()).unwrap();
    let s = serve(dir.path(), &["--chat-template", "qwen3"]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
                       "required": ["city"], "additionalProperties": false}}}]);
    let messages = json!([{"role": "user", "content": "Weather in Paris?"}]);
    let (status, plain) = post(&s.addr, "/tokenize", &json!({"messages": messages}));
    assert_eq!(status, 200, "{plain}");
    let (status, listed) = post(&s.addr, "/tokenize", &json!({"messages": messages, "tools": tools}));
    assert_eq!(status, 200, "{listed}");
    assert!(listed["count"].as_u64() > plain["count"].as_u64(), "the tools are in the prompt: {listed}");

    let body = json!({"model": "tiny", "messages": messages, "tools": tools, "tool_choice": "required",
                      "parallel_tool_calls": false, "temperature": 0, "max_tokens": 64});
    let (status, doc) = post(&s.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{doc}");
    let choice = &doc["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{doc}");
    let calls = choice["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 1, "{doc}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"] == "Paris" || args["city"] == "Oslo", "{args}");

    // The call goes back into the history with its result, as the template's next turn reads it.
    let history =
        json!([messages[0], choice["message"], {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18C"}]);
    let body = json!({"model": "tiny", "messages": history, "tools": tools, "max_tokens": 4});
    let (status, doc) = post(&s.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{doc}");
}

#[test]
fn continue_final_message_leaves_the_last_message_open_for_the_model_to_continue() {
    let dir = model_dir(None);
    let s = serve(dir.path(), &[]);
    let text = |ids: &Value| {
        let (status, doc) = post(&s.addr, "/detokenize", &json!({"tokens": ids}));
        assert_eq!(status, 200, "{doc}");
        doc["prompt"].as_str().unwrap().to_string()
    };
    let user = json!({"role": "user", "content": "hi"});
    let (status, opened) = post(&s.addr, "/tokenize", &json!({"messages": [user]}));
    assert_eq!(status, 200, "{opened}");
    // ChatML: the assistant's turn opened, then the prefill, and no <|im_end|> after it.
    let both = json!([user, {"role": "assistant", "content": "Hello there"}]);
    let (status, open) = post(&s.addr, "/tokenize", &json!({"messages": both, "continue_final_message": true}));
    assert_eq!(status, 200, "{open}");
    assert_eq!(text(&open["tokens"]), format!("{}Hello there", text(&opened["tokens"])));
    let (_, closed) = post(&s.addr, "/tokenize", &json!({"messages": both, "add_generation_prompt": false}));
    assert!(text(&closed["tokens"]).ends_with("Hello there<|im_end|>\n"), "{closed}");
    // Chat completions take it too, and refuse it beside a generation prompt or without text.
    let body = json!({"model": "tiny", "messages": both, "continue_final_message": true, "max_tokens": 2});
    let (status, doc) = post(&s.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["usage"]["prompt_tokens"], open["count"], "{doc}");
    for (bad, why) in [
        (
            json!({"messages": both, "continue_final_message": true, "add_generation_prompt": true}),
            "add_generation_prompt",
        ),
        (json!({"messages": [user, {"role": "assistant", "content": " "}], "continue_final_message": true}), "no text"),
    ] {
        let (status, doc) = post(&s.addr, "/tokenize", &bad);
        assert_eq!(status, 400, "{doc}");
        assert_eq!(doc["error"]["param"], "continue_final_message", "{doc}");
        assert!(doc["error"]["message"].as_str().unwrap().contains(why), "{doc}");
    }
}

/// `reasoning_effort` reaches a template that reads it (as gpt-oss's does), over a
/// `chat_template_kwargs` entry of that name; a template that does not read it, or a value
/// other than low / medium / high, is a 400 naming the field.
#[test]
fn reasoning_effort_reaches_a_template_that_reads_it_and_is_refused_elsewhere() {
    let dir = model_dir(Some(
        "{% if reasoning_effort == 'high' %}think hard, very hard {% endif %}{{ messages[0]['content'] }}",
    ));
    let s = serve(dir.path(), &[]);
    let prompt_tokens = |extra: Value| -> u64 {
        let mut body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, doc) = post(&s.addr, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{doc}");
        doc["usage"]["prompt_tokens"].as_u64().unwrap()
    };
    let (low, high) =
        (prompt_tokens(json!({"reasoning_effort": "low"})), prompt_tokens(json!({"reasoning_effort": "high"})));
    assert!(high > low + 3, "{low} {high}");
    let kw = json!({"reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "low"}});
    assert_eq!(prompt_tokens(kw), high, "the field wins over the kwargs entry");
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"});
    let (status, doc) = post(&s.addr, "/v1/chat/completions", &body);
    assert_eq!((status, doc["error"]["param"].as_str()), (400, Some("reasoning_effort")), "{doc}");
    drop(s);
    let plain_dir = model_dir(Some("{{ messages[0]['content'] }}"));
    let plain = serve(plain_dir.path(), &[]);
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low"});
    let (status, doc) = post(&plain.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 400, "{doc}");
    assert!(doc["error"]["message"].as_str().is_some_and(|m| m.contains("does not read reasoning_effort")), "{doc}");
}
