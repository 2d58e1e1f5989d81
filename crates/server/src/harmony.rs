//! gpt-oss's harmony output (`--reasoning-parser gpt_oss`): the reply is messages, each a header
//! (`<|channel|>NAME`, a recipient, `<|constrain|>...`) then `<|message|>` and its text, ended by
//! `<|end|>`, `<|return|>` or `<|call|>`, the next opened by `<|start|>assistant`. Text of the
//! `analysis` channel is reasoning; any other channel's (`final`, `commentary`) is the answer;
//! the markup itself is neither. A message to a function (`to=functions.NAME` in its header) is
//! a tool call: its text (the arguments' JSON) is given to the answer as a Hermes block
//! (`<tool_call>{"name": NAME, "arguments": ...}</tool_call>`), which the tool parser reads.
//! Read from text decoded with the special tokens kept, a piece that may begin a marker held
//! back until it does not.

/// Where in the reply the text is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum At {
    /// Before a message's `<|message|>`: its header so far.
    Header(String),
    /// In a message's text: whether its channel is `analysis`, and the function it calls.
    Body { analysis: bool, call: Option<String> },
}

/// One reply's split, piece by piece.
#[derive(Debug)]
pub struct Harmony {
    at: At,
    /// Text not yet given out (a possible start of a marker).
    held: String,
    saw_reasoning: bool,
    answering: bool,
}

/// Markers that end a message's text.
const ENDS: [&str; 4] = ["<|end|>", "<|return|>", "<|call|>", "<|start|>"];
const MESSAGE: &str = "<|message|>";

impl Default for Harmony {
    fn default() -> Harmony {
        Harmony::new()
    }
}

impl Harmony {
    /// A split of a new reply (the prompt ended with `<|start|>assistant`).
    pub fn new() -> Harmony {
        Harmony { at: At::Header(String::new()), held: String::new(), saw_reasoning: false, answering: false }
    }

    /// The reasoning and answer text `piece` settles.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        self.held.push_str(piece);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match &mut self.at {
                At::Header(header) => match self.held.find(MESSAGE) {
                    Some(i) => {
                        header.push_str(&self.held[..i]);
                        let analysis = channel(header) == Some("analysis");
                        let call = function(header).filter(|_| !analysis).map(str::to_string);
                        if let Some(name) = &call {
                            let name = serde_json::to_string(name).unwrap_or_default();
                            content.push_str(&format!("<tool_call>{{\"name\": {name}, \"arguments\": "));
                        }
                        self.held.drain(..i + MESSAGE.len());
                        self.at = At::Body { analysis, call };
                    }
                    None => {
                        let keep = partial(&self.held, &[MESSAGE]);
                        header.extend(self.held.drain(..self.held.len() - keep));
                        return (reasoning, content);
                    }
                },
                At::Body { analysis, call } => {
                    let (analysis, calling) = (*analysis, call.is_some());
                    let end = ENDS.iter().filter_map(|m| self.held.find(m).map(|i| (i, m.len()))).min();
                    let (text, rest) = match end {
                        Some((i, len)) => (self.held[..i].to_string(), Some(i + len)),
                        None => {
                            let keep = partial(&self.held, &ENDS);
                            (self.held[..self.held.len() - keep].to_string(), None)
                        }
                    };
                    if analysis {
                        self.saw_reasoning |= !text.is_empty();
                        reasoning.push_str(&text);
                    } else {
                        self.answering |= !text.is_empty();
                        content.push_str(&text);
                    }
                    match rest {
                        Some(n) => {
                            if calling {
                                content.push_str("}</tool_call>");
                            }
                            self.held.drain(..n);
                            self.at = At::Header(String::new());
                        }
                        None => {
                            self.held.drain(..text.len());
                            return (reasoning, content);
                        }
                    }
                }
            }
        }
    }

    /// What is still held when the reply ends: a body's last text (a marker cut short is text).
    pub fn finish(&mut self) -> (String, String) {
        let held = std::mem::take(&mut self.held);
        match self.at {
            At::Body { analysis: true, .. } => (held, String::new()),
            At::Body { analysis: false, call: Some(_) } => (String::new(), format!("{held}}}</tool_call>")),
            At::Body { analysis: false, call: None } => (String::new(), held),
            // Text that never opened a message (no channel named): the answer, as it came.
            At::Header(ref h) if !h.contains("<|channel|>") && !h.contains("<|start|>") => {
                (String::new(), format!("{h}{held}"))
            }
            // A header never finished: no message text.
            At::Header(_) => (String::new(), String::new()),
        }
    }

    /// Whether any of the reply so far was reasoning.
    pub fn saw_reasoning(&self) -> bool {
        self.saw_reasoning
    }

    /// Whether the answer has started.
    pub fn answering(&self) -> bool {
        self.answering
    }
}

/// The channel a header names (`<|channel|>final`, maybe followed by ` to=...`), if any.
fn channel(header: &str) -> Option<&str> {
    let (_, rest) = header.split_once("<|channel|>")?;
    rest.split(|c: char| c.is_whitespace() || c == '<').next().filter(|c| !c.is_empty())
}

/// The function a header sends its message to (`to=functions.NAME`), if any.
fn function(header: &str) -> Option<&str> {
    let (_, rest) = header.split_once("to=functions.")?;
    rest.split(|c: char| c.is_whitespace() || c == '<').next().filter(|n| !n.is_empty())
}

/// Bytes at the end of `text` that begin one of `markers`.
fn partial(text: &str, markers: &[&str]) -> usize {
    markers.iter().map(|m| crate::reasoning::partial_tag(text, m)).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant\
                         <|channel|>final<|message|>It is 4.<|return|>";

    /// `text` pushed in pieces of `n` chars: the reasoning and the answer joined.
    fn streamed(text: &str, n: usize) -> (String, String, bool) {
        let mut h = Harmony::new();
        let chars: Vec<char> = text.chars().collect();
        let (mut r, mut c) = (String::new(), String::new());
        for piece in chars.chunks(n) {
            let (a, b) = h.push(&piece.iter().collect::<String>());
            r += &a;
            c += &b;
        }
        let (a, b) = h.finish();
        (r + &a, c + &b, h.saw_reasoning())
    }

    #[test]
    fn analysis_is_reasoning_and_final_the_answer_in_any_pieces() {
        for n in 1..20 {
            assert_eq!(streamed(REPLY, n), ("User asks 2+2. Easy.".into(), "It is 4.".into(), true), "pieces of {n}");
        }
    }

    #[test]
    fn commentary_is_answer_headers_are_neither_and_cut_replies_keep_their_text() {
        // A call to a function, in either header order: a Hermes block of its name and arguments.
        let block = "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2}}</tool_call>";
        let tool = "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 2}<|call|>";
        assert_eq!(streamed(tool, 3), (String::new(), block.into(), false));
        let tool = " to=functions.add<|channel|>commentary json<|message|>{\"a\": 2}<|call|>";
        assert_eq!(streamed(tool, 5), (String::new(), block.into(), false));
        let (left, calls) = crate::tool_formats::parse_blocks(block, &|_, _| false).expect("a Hermes block");
        assert_eq!((left.as_str(), calls.len()), ("", 1), "the tool parser reads it");
        let plain = "<|channel|>commentary<|message|>Let me add.<|end|>";
        assert_eq!(streamed(plain, 2), (String::new(), "Let me add.".into(), false));
        // Cut short inside the analysis: what came is reasoning; inside a header: nothing.
        assert_eq!(streamed("<|channel|>analysis<|message|>thinking <|e", 4).0, "thinking <|e");
        assert_eq!(streamed("<|channel|>fin", 2), (String::new(), String::new(), false));
        // A reply without harmony markup is all answer.
        assert_eq!(streamed("just text", 3), (String::new(), "just text".into(), false));
        assert_eq!(channel("<|channel|>final to=x"), Some("final"));
        assert_eq!(channel("assistant"), None);
    }
}
