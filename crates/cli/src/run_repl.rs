//! `tensorfold run`'s interactive chat: a line editor at `>>> `, slash commands, replies
//! streamed; Ctrl-C stops a reply (not the program), at the prompt it drops what was typed and
//! says how to leave; Ctrl-D or `/bye` leaves.

use crate::exit::{Failure, failed};
use crate::run_chat::{Chat, Ended};
use crate::run_input::{Entry, HELP, Lines, entry};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use std::io::Write;

/// Chats until `/bye` or Ctrl-D.
pub fn repl(chat: &mut Chat) -> Result<(), Failure> {
    // While a reply runs the terminal sends SIGINT for Ctrl-C: it stops the reply.
    signal_hook::flag::register(signal_hook::consts::SIGINT, chat.cancel_flag())
        .map_err(|e| failed(format!("cannot catch Ctrl-C: {e}")))?;
    let mut editor = DefaultEditor::new().map_err(|e| failed(format!("the line editor: {e}")))?;
    let mut lines = Lines::default();
    println!("Send a message (/? for help)");
    loop {
        let prompt = if lines.open() { "... " } else { ">>> " };
        let text = match editor.readline(prompt) {
            Ok(line) => match lines.push(&line) {
                Some(text) => text,
                None => continue,
            },
            Err(ReadlineError::Interrupted) => {
                lines.clear();
                println!("Use Ctrl + d or /bye to exit.");
                continue;
            }
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(failed(format!("reading the prompt: {e}"))),
        };
        if text.trim().is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(text.as_str());
        if !act(chat, entry(&text))? {
            return Ok(());
        }
    }
}

/// Does what one entry asks; false to leave.
fn act(chat: &mut Chat, e: Entry) -> Result<bool, Failure> {
    match e {
        Entry::Bye => return Ok(false),
        Entry::Message(text) => {
            let mut out = std::io::stdout().lock();
            let ended = chat.reply(&text, &mut out)?;
            let note = match ended {
                Ended::Done => String::new(),
                Ended::Interrupted => "\n(stopped)".into(),
                Ended::Refused(why) => format!("error: {why}"),
            };
            writeln!(out, "{note}\n").map_err(failed)?;
        }
        Entry::Clear => {
            chat.clear();
            println!("Cleared the conversation.");
        }
        Entry::SetParameter(name, value) => match chat.set_parameter(&name, &value) {
            Ok(done) => println!("{done}"),
            Err(why) => println!("error: {why}"),
        },
        Entry::SetSystem(text) => {
            chat.system = Some(text).filter(|t| !t.is_empty());
            println!("Set system message.");
        }
        Entry::Show(what) => show(chat, &what),
        Entry::Help => println!("{HELP}"),
        Entry::Unknown(cmd) => println!("Unknown command '{cmd}'. Type /? for help"),
    }
    Ok(true)
}

fn show(chat: &Chat, what: &str) {
    let lines = match what {
        "parameters" => chat.parameters(),
        "system" => vec![chat.system.clone().unwrap_or_else(|| "No system message was specified.".into())],
        "" | "info" => chat.info().to_vec(),
        other => vec![format!("Unknown /show '{other}': parameters, system or info")],
    };
    for l in lines {
        println!("{l}");
    }
}
