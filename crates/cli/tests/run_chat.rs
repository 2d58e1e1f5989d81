//! `tensorfold run`: one reply from PROMPT or stdin, and the interactive chat on a terminal (two
//! turns, `/clear`, Ctrl-C during a reply, `/bye`); greedy replies equal what the server's chat
//! gives for the same conversation.

mod pty_util;
mod serve_util;

use pty_util::Pty;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

const FIRST: &str = "Hello there";
const SECOND: &str = "And then?";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tensorfold"))
}

/// The switches of a short greedy reply on the CPU.
fn greedy(dir: &str) -> Vec<String> {
    ["run", dir, "--temperature", "0", "--max-tokens", "12", "--device", "cpu", "--threads", "1"]
        .map(String::from)
        .to_vec()
}

/// `run`'s one reply to `stdin` (exit 0), without the final newline.
fn reply_from_stdin(dir: &str, stdin: &str) -> String {
    let mut child = bin().args(greedy(dir)).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.strip_suffix('\n').unwrap_or_else(|| panic!("no final newline: {text:?}")).to_string()
}

/// The server's greedy chat answer to `messages`.
fn server_reply(server: &serve_util::Server, messages: Value) -> String {
    let r = server.post("/v1/chat/completions", &json!({"messages": messages, "max_tokens": 12, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["message"]["content"].as_str().unwrap().to_string()
}

#[test]
fn one_reply_from_a_prompt_or_stdin_equals_the_servers_chat() {
    let dir = serve_util::model_dir();
    let path = dir.path().to_str().unwrap().to_string();
    let from_stdin = reply_from_stdin(&path, &format!("{FIRST}\n"));
    let out = bin().args(greedy(&path)).arg(FIRST).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{from_stdin}\n"), "PROMPT and stdin agree");
    let server = serve_util::Server::start_in(dir, &[]);
    assert!(!from_stdin.is_empty());
    assert_eq!(server_reply(&server, json!([{"role": "user", "content": FIRST}])), from_stdin);
}

#[test]
fn a_chat_on_a_terminal_keeps_its_turns_clears_them_and_ends_with_bye() {
    let dir = serve_util::model_dir();
    let path = dir.path().to_str().unwrap().to_string();
    let mut pty = Pty::spawn(&greedy(&path).iter().map(String::as_str).collect::<Vec<_>>());
    pty.expect(">>> ", 60);
    pty.send(&format!("{FIRST}\r"));
    let first = pty.expect(">>> ", 60);
    pty.send(&format!("{SECOND}\r"));
    let second = pty.expect(">>> ", 60);
    pty.send("/clear\r");
    assert!(pty.expect(">>> ", 10).contains("Cleared the conversation."));
    pty.send(&format!("{FIRST}\r"));
    let after_clear = pty.expect(">>> ", 60);
    pty.send("/bye\r");
    assert_eq!(pty.wait(20), Some(0), "/bye exits 0");

    let server = serve_util::Server::start_in(dir, &[]);
    let a1 = server_reply(&server, json!([{"role": "user", "content": FIRST}]));
    let conversation = json!([
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": a1},
        {"role": "user", "content": SECOND},
    ]);
    let a2 = server_reply(&server, conversation);
    assert_ne!(a1, a2, "the second turn sees the first");
    assert!(first.contains(&format!("\n{a1}\n\n")), "turn 1 {first:?} lacks {a1:?}");
    assert!(second.contains(&format!("\n{a2}\n\n")), "turn 2 {second:?} lacks {a2:?}");
    assert!(after_clear.contains(&format!("\n{a1}\n\n")), "after /clear {after_clear:?} lacks {a1:?}");
}

#[test]
fn ctrl_c_stops_a_reply_and_the_chat_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    // A model slow enough (a vocabulary of 151936 rows, 1 thread) that a reply of 3000 tokens runs
    // for minutes unless stopped.
    let synth = bin().args(["synth", "--like", "qwen3-0.6b", "--layers", "1", "--out", path]).output().unwrap();
    assert!(synth.status.success(), "{synth:?}");
    let template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:";
    std::fs::write(dir.path().join("chat_template.jinja"), template).unwrap();
    let args = ["run", path, "--temperature", "0", "--max-tokens", "3000", "--device", "cpu", "--threads", "1"];
    let mut pty = Pty::spawn(&args);
    pty.expect(">>> ", 120);
    pty.send("Tell me everything\r");
    // Ctrl-C until the prompt is back (one lands in the reply; later ones only print a hint).
    let mut stopped = false;
    for _ in 0..60 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        pty.send("\x03");
        if pty.sees("(stopped)", 0.5) {
            stopped = true;
            break;
        }
    }
    assert!(stopped, "Ctrl-C did not stop the reply");
    assert_eq!(pty.child.try_wait().unwrap(), None, "Ctrl-C ended the program");
    pty.expect(">>> ", 30);
    pty.send("/set parameter max_tokens 2\r");
    assert!(pty.expect(">>> ", 10).contains("Set parameter 'max_tokens' to '2'"));
    pty.send("Again\r");
    pty.expect(">>> ", 60);
    pty.send("\x04");
    assert_eq!(pty.wait(20), Some(0), "Ctrl-D exits 0");
}

/// gpt-oss answers in harmony messages: `run` reads them with the `gpt_oss` parser unless
/// another is named (the tiny model's reply has no harmony markup, so it is all answer).
#[test]
fn a_gpt_oss_reply_is_read_as_harmony_by_default() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt_oss");
    let mut args = greedy(dir.to_str().unwrap());
    args.extend(["--chat-template", "chatml", "2 + 2?"].map(String::from));
    let out = bin().args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.trim().is_empty() && !text.contains("Thinking..."), "{text:?}");
    // Named otherwise: the parser given is used.
    args.extend(["--reasoning-parser", "qwen3"].map(String::from));
    let named = bin().args(&args).output().unwrap();
    assert!(named.status.success(), "{}", String::from_utf8_lossy(&named.stderr));
}
