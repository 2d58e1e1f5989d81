//! `--reasoning-parser`: a reasoning model's thinking split off a chat answer's text into
//! `reasoning_content`, whole or piece by piece as it streams, before tool calls are parsed
//! from the rest. Text only: the tags are matched in the detokenized text wherever the
//! tokenizer cut it, and a piece that may be the start of a tag is held back until it is not.
//! A structured output's constraint holds on the answer alone ([`Gate`], constraint.rs).

use tf_tokenize::Tokenizer;

/// Where a model's reasoning is in its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningParser {
    /// Qwen3 (thinking on): the output opens with `<think>` (after any whitespace) and the
    /// reasoning ends at `</think>`; an output that does not open with it is all answer.
    Qwen3,
    /// DeepSeek R1 (and templates that open the `<think>` block in the prompt: Qwen3's
    /// thinking-only releases, GLM-4.5): everything before `</think>` is reasoning (a leading
    /// `<think>` dropped); an output without it is all reasoning, cut before its answer.
    DeepSeekR1,
    /// gpt-oss's harmony messages (harmony.rs): the `analysis` channel is reasoning, the others
    /// the answer; read from text with the special tokens kept.
    GptOss,
}

impl ReasoningParser {
    /// The parser called `name` (`qwen3`, `deepseek_r1`), if any.
    pub fn named(name: &str) -> Option<ReasoningParser> {
        match name {
            "qwen3" => Some(ReasoningParser::Qwen3),
            "deepseek_r1" => Some(ReasoningParser::DeepSeekR1),
            "gpt_oss" => Some(ReasoningParser::GptOss),
            _ => None,
        }
    }

    /// This parser as a request's prompt leaves it: DeepSeek R1's, where the prompt already
    /// closed the reasoning block (its text ends with `</think>` and whitespace: a template with
    /// thinking off), reads the output as Qwen3's does, all answer unless it opens `<think>`.
    pub fn for_prompt(self, prompt: &[u32], tok: Option<&Tokenizer>) -> ReasoningParser {
        let tail = &prompt[prompt.len().saturating_sub(PROMPT_TAIL)..];
        let closed = tok.and_then(|t| t.decode(tail, false).ok()).is_some_and(|t| t.trim_end().ends_with(CLOSE));
        match self {
            ReasoningParser::DeepSeekR1 if closed => ReasoningParser::Qwen3,
            p => p,
        }
    }

    /// This parser for an output that continues `prefill`, a final assistant message left open
    /// (`continue_final_message`): inside a `<think>` block the prefill opened and did not close,
    /// the output starts in its reasoning (DeepSeek R1's reading); after a block it closed, the
    /// output is answer unless it opens another (Qwen3's); without either tag, as it was.
    pub fn for_prefill(self, prefill: &str) -> ReasoningParser {
        if self == ReasoningParser::GptOss {
            return self;
        }
        match (prefill.rfind(OPEN), prefill.rfind(CLOSE)) {
            (None, None) => self,
            (Some(open), Some(close)) if close > open => ReasoningParser::Qwen3,
            (None, Some(_)) => ReasoningParser::Qwen3,
            (Some(_), _) => ReasoningParser::DeepSeekR1,
        }
    }

    /// Where a structured output's constraint starts in an output this parser reads: after the
    /// reasoning, told by the think tags' ids (`None` where the tokenizer does not have each as
    /// one token: the constraint then holds from the first token).
    pub fn gate(self, tok: &Tokenizer) -> Option<Gate> {
        let close = tok.token_to_id(CLOSE)?;
        let open = match self {
            ReasoningParser::Qwen3 => Some(tok.token_to_id(OPEN)?),
            ReasoningParser::DeepSeekR1 => None,
            ReasoningParser::GptOss => return None,
        };
        Some(Gate { open, close })
    }

    /// Whether its text is decoded with the special tokens kept (harmony's markup is special
    /// tokens; the split drops it).
    pub fn keeps_special_tokens(self) -> bool {
        self == ReasoningParser::GptOss
    }

    /// Splits a whole output into its reasoning (`None` where it has none) and its answer.
    pub fn split(self, text: &str) -> (Option<String>, String) {
        let mut s = Splitter::new(self);
        let (mut reasoning, mut content) = s.push(text);
        let (r, c) = s.finish();
        reasoning.push_str(&r);
        content.push_str(&c);
        (s.saw_reasoning().then_some(reasoning), content)
    }
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";
/// Prompt tokens whose text [`ReasoningParser::for_prompt`] reads.
const PROMPT_TAIL: usize = 16;

/// Where the reasoning ends in token ids, for a constraint that holds only on the answer
/// (constraint.rs `AfterReasoning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// Qwen3: the `<think>` id, which opens reasoning as the first token (any other first token
    /// starts the answer); DeepSeek R1: none, the output opens in its reasoning.
    pub open: Option<u32>,
    /// The `</think>` id, after which the answer starts.
    pub close: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before anything but whitespace: whether the output opens with `<think>` is not known.
    Start,
    Reasoning,
    /// The answer; `trim` while the newlines after `</think>` are still being dropped.
    Content {
        trim: bool,
    },
}

/// One streamed output's split: each piece pushed gives the reasoning and answer text that is
/// certain so far.
#[derive(Debug)]
pub struct Splitter {
    parser: ReasoningParser,
    /// gpt-oss's split, which reads messages rather than tags.
    harmony: Option<crate::harmony::Harmony>,
    phase: Phase,
    /// Text not yet given out: the start of the output, or a possible start of a tag.
    held: String,
    /// Whether any of the output was reasoning (a `<think>` opened it, or R1's implicit one).
    saw_reasoning: bool,
}

impl Splitter {
    /// A split of a new output.
    pub fn new(parser: ReasoningParser) -> Splitter {
        let harmony = (parser == ReasoningParser::GptOss).then(crate::harmony::Harmony::new);
        Splitter { parser, harmony, phase: Phase::Start, held: String::new(), saw_reasoning: false }
    }

    /// The reasoning and answer text `piece` settles.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        if let Some(h) = &mut self.harmony {
            return h.push(piece);
        }
        self.held.push_str(piece);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.phase {
                Phase::Start => {
                    let body = self.held.trim_start();
                    if let Some(rest) = body.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.enter_reasoning();
                    } else if OPEN.starts_with(body) {
                        return (reasoning, content); // "", or a part of "<think>": wait
                    } else if self.parser == ReasoningParser::DeepSeekR1 {
                        self.enter_reasoning();
                    } else {
                        self.phase = Phase::Content { trim: false };
                    }
                }
                Phase::Reasoning => match self.held.find(CLOSE) {
                    Some(at) => {
                        reasoning.push_str(&self.held[..at]);
                        self.held.drain(..at + CLOSE.len());
                        self.phase = Phase::Content { trim: true };
                    }
                    None => {
                        let keep = partial_tag(&self.held, CLOSE);
                        reasoning.extend(self.held.drain(..self.held.len() - keep));
                        return (reasoning, content);
                    }
                },
                Phase::Content { trim } => {
                    if trim {
                        let body = self.held.trim_start_matches(['\n', '\r']);
                        if body.is_empty() {
                            self.held.clear();
                            return (reasoning, content);
                        }
                        self.held = body.to_string();
                        self.phase = Phase::Content { trim: false };
                    }
                    content.push_str(&self.held);
                    self.held.clear();
                    return (reasoning, content);
                }
            }
        }
    }

    /// Whether any of the output so far was reasoning.
    pub fn saw_reasoning(&self) -> bool {
        self.harmony.as_ref().map_or(self.saw_reasoning, |h| h.saw_reasoning())
    }

    /// Whether the answer has started (some of it given out).
    pub fn answering(&self) -> bool {
        self.harmony.as_ref().map_or(matches!(self.phase, Phase::Content { trim: false }), |h| h.answering())
    }

    /// What is still held when the output ends.
    pub fn finish(&mut self) -> (String, String) {
        if let Some(h) = &mut self.harmony {
            return h.finish();
        }
        let held = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Reasoning => (held, String::new()),
            Phase::Start if self.parser == ReasoningParser::DeepSeekR1 && !held.trim().is_empty() => {
                self.saw_reasoning = true;
                (held.trim_start().strip_prefix(OPEN).unwrap_or(held.trim_start()).to_string(), String::new())
            }
            Phase::Start if held.trim_start().starts_with(OPEN) => {
                self.saw_reasoning = true;
                (String::new(), String::new())
            }
            _ => (String::new(), held),
        }
    }

    fn enter_reasoning(&mut self) {
        self.phase = Phase::Reasoning;
        self.saw_reasoning = true;
    }
}

/// Bytes at the end of `text` that begin `tag` (held back: the rest may follow).
pub(crate) fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` pushed in pieces of `n` chars: the reasoning and the answer joined, and whether the
    /// output had reasoning.
    fn streamed(p: ReasoningParser, text: &str, n: usize) -> (String, String) {
        let mut s = Splitter::new(p);
        let chars: Vec<char> = text.chars().collect();
        let (mut r, mut c) = (String::new(), String::new());
        for piece in chars.chunks(n) {
            let (a, b) = s.push(&piece.iter().collect::<String>());
            r += &a;
            c += &b;
        }
        let (a, b) = s.finish();
        (r + &a, c + &b)
    }

    #[test]
    fn a_prefill_inside_or_after_a_think_block_says_where_the_output_starts() {
        for p in [ReasoningParser::Qwen3, ReasoningParser::DeepSeekR1] {
            let inside = p.for_prefill("<think>\nFirst, 2 + 2");
            assert_eq!(inside, ReasoningParser::DeepSeekR1);
            let (r, c) = inside.split(" = 4.\n</think>\n\nThe answer is 4.");
            assert_eq!((r.as_deref(), c.as_str()), (Some(" = 4.\n"), "The answer is 4."));
            let after = p.for_prefill("<think>\n2 + 2 = 4.\n</think>\n\nThe answer is");
            assert_eq!(after, ReasoningParser::Qwen3);
            assert_eq!(after.split(" 4."), (None, " 4.".into()));
            // A block closed and another opened: inside again.
            assert_eq!(p.for_prefill("<think>a</think> b <think>c"), ReasoningParser::DeepSeekR1);
            assert_eq!(p.for_prefill("Sure, the answer is"), p, "no tag: as the prompt left it");
        }
    }

    #[test]
    fn qwen3_splits_an_opening_think_block_off_the_answer() {
        let p = ReasoningParser::Qwen3;
        let text = "<think>\nLet me add: 2 + 2 = 4.\n</think>\n\nThe answer is 4.";
        let (r, c) = p.split(text);
        assert_eq!(r.as_deref(), Some("\nLet me add: 2 + 2 = 4.\n"));
        assert_eq!(c, "The answer is 4.");
        for n in 1..12 {
            assert_eq!(streamed(p, text, n), (r.clone().unwrap(), c.clone()), "pieces of {n}");
        }
        // No opening tag: all answer, even with a tag later on.
        assert_eq!(p.split("4, because <think> is text here"), (None, "4, because <think> is text here".into()));
        assert_eq!(streamed(p, "  <thin", 1), (String::new(), "  <thin".into()), "a cut tag is text");
        // Cut before the end of its reasoning: all reasoning.
        assert_eq!(p.split("<think>still going"), (Some("still going".into()), String::new()));
    }

    #[test]
    fn deepseek_r1_takes_everything_before_the_closing_tag_as_reasoning() {
        let p = ReasoningParser::DeepSeekR1;
        let text = "First, 2 + 2.\n</think>\n\nIt is 4.";
        assert_eq!(p.split(text), (Some("First, 2 + 2.\n".into()), "It is 4.".into()));
        for n in 1..10 {
            assert_eq!(streamed(p, text, n), ("First, 2 + 2.\n".into(), "It is 4.".into()), "pieces of {n}");
        }
        assert_eq!(p.split("<think>a</think>b"), (Some("a".into()), "b".into()));
        assert_eq!(p.split("no end tag"), (Some("no end tag".into()), String::new()));
        assert_eq!(p.split(""), (None, String::new()));
        // A tag's start held back is given out once it is not one.
        assert_eq!(streamed(p, "x </thinking> y", 1), ("x </thinking> y".into(), String::new()));
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let p = ReasoningParser::Qwen3;
        let text = "<think>日本語の推論</think>答え：４";
        for n in 1..6 {
            assert_eq!(streamed(p, text, n), ("日本語の推論".into(), "答え：４".into()));
        }
    }
}
