//! `run --reasoning-parser`: a reply's reasoning shown between `Thinking...` and
//! `...done thinking.` (as Ollama shows it) or hidden (`--hide-thinking`), its answer after it;
//! only the answer joins the conversation.

use tf_server::reasoning::{ReasoningParser, Splitter};

/// How one reply's text is shown.
pub struct ThinkingView {
    split: Splitter,
    hide: bool,
    /// The reasoning has been shown from its header on.
    shown: bool,
    /// The answer has started.
    answering: bool,
}

impl ThinkingView {
    /// A view of a new reply under `parser`, its reasoning hidden where `hide`.
    pub fn new(parser: ReasoningParser, hide: bool) -> ThinkingView {
        ThinkingView { split: Splitter::new(parser), hide, shown: false, answering: false }
    }

    /// What to print for `piece`, and the answer text it holds.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        let (reasoning, answer) = self.split.push(piece);
        self.show(reasoning, answer)
    }

    /// What to print at the reply's end, and the answer text still held.
    pub fn finish(&mut self) -> (String, String) {
        let (reasoning, answer) = self.split.finish();
        let (mut out, answer) = self.show(reasoning, answer);
        if self.shown && !self.answering {
            out.push_str("\n...done thinking.\n");
        }
        (out, answer)
    }

    fn show(&mut self, reasoning: String, answer: String) -> (String, String) {
        let mut out = String::new();
        if !reasoning.is_empty() && !self.hide {
            if !self.shown {
                out.push_str("Thinking...\n");
                self.shown = true;
            }
            out.push_str(&reasoning);
        }
        if !answer.is_empty() {
            if self.shown && !self.answering {
                out.push_str("\n...done thinking.\n\n");
            }
            self.answering = true;
            out.push_str(&answer);
        }
        (out, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything printed and the answer, for `pieces`.
    fn view(parser: ReasoningParser, hide: bool, pieces: &[&str]) -> (String, String) {
        let mut v = ThinkingView::new(parser, hide);
        let (mut out, mut answer) = (String::new(), String::new());
        for p in pieces {
            let (o, a) = v.push(p);
            out += &o;
            answer += &a;
        }
        let (o, a) = v.finish();
        (out + &o, answer + &a)
    }

    #[test]
    fn reasoning_is_framed_or_hidden_and_only_the_answer_is_kept() {
        let pieces = ["<thi", "nk>\nLet me ", "add.\n</th", "ink>\n\n", "It is 4."];
        let (out, answer) = view(ReasoningParser::Qwen3, false, &pieces);
        assert_eq!(out, "Thinking...\n\nLet me add.\n\n...done thinking.\n\nIt is 4.");
        assert_eq!(answer, "It is 4.");
        assert_eq!(view(ReasoningParser::Qwen3, true, &pieces), ("It is 4.".into(), "It is 4.".into()));
        // No reasoning: the answer alone; reasoning cut short: framed to its end.
        assert_eq!(view(ReasoningParser::Qwen3, false, &["Hi", "!"]), ("Hi!".into(), "Hi!".into()));
        let cut = view(ReasoningParser::DeepSeekR1, false, &["still ", "thinking"]);
        assert_eq!(cut, ("Thinking...\nstill thinking\n...done thinking.\n".into(), String::new()));
    }
}
