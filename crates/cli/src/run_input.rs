//! What `tensorfold run` reads at its prompt: lines joined into one message (a `"""` block, as
//! Ollama's, or lines ending in a backslash), and slash commands.

/// What one entry at the prompt asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A message to the model.
    Message(String),
    /// `/bye`: leave.
    Bye,
    /// `/clear`: forget the conversation.
    Clear,
    /// `/set parameter NAME VALUE`.
    SetParameter(String, String),
    /// `/set system TEXT` (empty: no system message).
    SetSystem(String),
    /// `/show [WHAT]`.
    Show(String),
    /// `/?` or `/help`.
    Help,
    /// A slash command that is none of these, or one missing its arguments.
    Unknown(String),
}

/// The help `/?` prints.
pub const HELP: &str = "\
Available commands:
  /set parameter NAME VALUE  temperature, top_p, top_k, min_p, repetition_penalty, seed, max_tokens
  /set system TEXT           the system message (empty to drop it)
  /show [parameters|system|info]
  /clear                     forget the conversation
  /bye                       leave (or Ctrl-D)
  /?, /help                  this help

Use \"\"\" to begin and end a message of several lines, or end a line with \\ to go on.
Ctrl-C stops a reply.";

/// Reads one entry from the lines of the prompt.
pub fn entry(text: &str) -> Entry {
    let t = text.trim();
    let Some(cmd) = t.strip_prefix('/').filter(|_| !text.contains('\n')) else {
        return Entry::Message(text.to_string());
    };
    let mut words = cmd.splitn(2, char::is_whitespace);
    let (name, rest) = (words.next().unwrap_or_default(), words.next().unwrap_or_default().trim());
    match (name, rest) {
        ("bye" | "exit", "") => Entry::Bye,
        ("clear", "") => Entry::Clear,
        ("?" | "help", _) => Entry::Help,
        ("show", what) => Entry::Show(what.to_string()),
        ("set", rest) => set(rest).unwrap_or_else(|| Entry::Unknown(t.to_string())),
        _ => Entry::Unknown(t.to_string()),
    }
}

fn set(rest: &str) -> Option<Entry> {
    let (what, value) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    match what {
        "system" => Some(Entry::SetSystem(value.trim().to_string())),
        "parameter" => {
            let (name, v) = value.trim().split_once(char::is_whitespace)?;
            Some(Entry::SetParameter(name.to_string(), v.trim().to_string()))
        }
        _ => None,
    }
}

/// Lines being joined into one entry.
#[derive(Debug, Default)]
pub struct Lines {
    text: String,
    /// Inside a `"""` block.
    quoted: bool,
    /// The last line ended in a backslash.
    continued: bool,
}

impl Lines {
    /// Whether a line is awaited to finish the entry (the prompt shows `...` then).
    pub fn open(&self) -> bool {
        self.quoted || self.continued
    }

    /// Adds a line; the whole entry once it is complete.
    pub fn push(&mut self, line: &str) -> Option<String> {
        if self.quoted {
            match line.trim_end().strip_suffix("\"\"\"") {
                Some(last) => {
                    self.text.push_str(last);
                    if last.is_empty() && self.text.ends_with('\n') {
                        self.text.pop();
                    }
                    self.quoted = false;
                    return Some(std::mem::take(&mut self.text));
                }
                None => {
                    self.text.push_str(line);
                    self.text.push('\n');
                    return None;
                }
            }
        }
        let line = match (self.continued, line.trim_start().strip_prefix("\"\"\"")) {
            (false, Some(rest)) => {
                self.quoted = true;
                if let Some(one) = rest.trim_end().strip_suffix("\"\"\"") {
                    self.quoted = false;
                    return Some(one.to_string());
                }
                return self.push_quoted_first(rest);
            }
            _ => line,
        };
        match line.strip_suffix('\\') {
            Some(head) => {
                self.text.push_str(head);
                self.text.push('\n');
                self.continued = true;
                None
            }
            None => {
                self.text.push_str(line);
                self.continued = false;
                Some(std::mem::take(&mut self.text))
            }
        }
    }

    fn push_quoted_first(&mut self, rest: &str) -> Option<String> {
        if !rest.is_empty() {
            self.text.push_str(rest);
            self.text.push('\n');
        }
        None
    }

    /// Drops a half-entered entry (Ctrl-C).
    pub fn clear(&mut self) {
        *self = Lines::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_anything_else_is_a_message() {
        assert_eq!(entry("/bye"), Entry::Bye);
        assert_eq!(entry(" /clear "), Entry::Clear);
        assert_eq!(entry("/?"), Entry::Help);
        assert_eq!(entry("/set parameter temperature 0.7"), Entry::SetParameter("temperature".into(), "0.7".into()));
        assert_eq!(entry("/set system You are brief."), Entry::SetSystem("You are brief.".into()));
        assert_eq!(entry("/set system"), Entry::SetSystem(String::new()));
        assert_eq!(entry("/show parameters"), Entry::Show("parameters".into()));
        assert_eq!(entry("/set parameter temperature"), Entry::Unknown("/set parameter temperature".into()));
        assert_eq!(entry("/nope"), Entry::Unknown("/nope".into()));
        assert_eq!(entry("hello /bye"), Entry::Message("hello /bye".into()));
        assert_eq!(entry("/bye\nmore"), Entry::Message("/bye\nmore".into()), "a block is always a message");
    }

    #[test]
    fn quotes_and_backslashes_join_lines() {
        let mut l = Lines::default();
        assert_eq!(l.push("one line"), Some("one line".into()));
        assert_eq!(l.push("\"\"\"first"), None);
        assert!(l.open());
        assert_eq!(l.push("second"), None);
        assert_eq!(l.push("third\"\"\""), Some("first\nsecond\nthird".into()));
        assert!(!l.open());
        assert_eq!(l.push("\"\"\""), None);
        assert_eq!(l.push("a"), None);
        assert_eq!(l.push("\"\"\""), Some("a".into()));
        assert_eq!(l.push("\"\"\"inline\"\"\""), Some("inline".into()));
        assert_eq!(l.push("x \\"), None);
        assert_eq!(l.push("y"), Some("x \ny".into()));
        assert_eq!(l.push("half \\"), None);
        l.clear();
        assert!(!l.open());
        assert_eq!(l.push("fresh"), Some("fresh".into()));
    }
}
