//! A request's compiled constraint as the engine's [`Constraint`]: the grammar compiler is built
//! once per server from the tokenizer's vocabulary (on first use), compiles on the HTTP side
//! (request preparation's blocking thread, capped in size, nesting, reference depth and time:
//! tf-grammar), and each sequence gets its own matcher. A matcher that fails allows only the end
//! of sequence. With a reasoning parser, a chat's constraint holds on its answer alone
//! ([`AfterReasoning`]), as vLLM's structured output does.

use crate::error::ApiError;
use crate::reasoning::Gate;
use crate::state::AppState;
use std::sync::Arc;
use tf_engine::constraint::{Constraint, Mask};
use tf_grammar::{Compiled, GrammarError, Grammars, SeqMatcher, Spec};
use tf_tokenize::Tokenizer;

/// The engine's view of one sequence's grammar.
pub struct GrammarConstraint {
    m: SeqMatcher,
    width: usize,
    eos: u32,
}

impl GrammarConstraint {
    /// A sequence's constraint from its matcher, over `width` ids, `eos` ending it.
    pub fn new(m: SeqMatcher, width: usize, eos: u32) -> GrammarConstraint {
        GrammarConstraint { m, width, eos }
    }
}

impl Constraint for GrammarConstraint {
    fn mask(&mut self) -> Mask {
        match self.m.mask() {
            Ok(words) => Mask::from_words(words),
            Err(_) => Mask::from_ids(self.width, [self.eos]),
        }
    }
    fn accept(&mut self, token: u32) -> bool {
        self.m.accept(token)
    }
    fn rollback(&mut self, n: usize) {
        self.m.rollback(n);
    }
    fn is_finished(&self) -> bool {
        self.m.is_stopped()
    }
}

/// A grammar that holds only on a reasoning model's answer ([`Gate`]): any token while the
/// output reasons, the grammar's from the first token of the answer. Qwen3's output starts
/// undecided: the grammar's first tokens or `<think>`.
pub struct AfterReasoning {
    grammar: GrammarConstraint,
    gate: Gate,
    /// Every id allowed (the reasoning's mask).
    all: Mask,
    /// Tokens taken.
    taken: usize,
    /// Tokens taken before the answer started, once it has.
    answer_from: Option<usize>,
}

/// Where an [`AfterReasoning`] output is.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Nothing taken yet and a `<think>` may open the reasoning.
    Undecided,
    Reasoning,
    Answer,
}

impl AfterReasoning {
    /// `grammar` holding after `gate`'s reasoning, over `width` ids.
    pub fn new(grammar: GrammarConstraint, gate: Gate, width: usize) -> AfterReasoning {
        let all = Mask::from_words(vec![u32::MAX; width.div_ceil(32)]);
        AfterReasoning { grammar, gate, all, taken: 0, answer_from: None }
    }

    fn phase(&self) -> Phase {
        match (self.answer_from, self.gate.open) {
            (Some(_), _) => Phase::Answer,
            (None, Some(_)) if self.taken == 0 => Phase::Undecided,
            (None, _) => Phase::Reasoning,
        }
    }
}

impl Constraint for AfterReasoning {
    fn mask(&mut self) -> Mask {
        match self.phase() {
            Phase::Answer => self.grammar.mask(),
            Phase::Reasoning => self.all.clone(),
            Phase::Undecided => {
                let mut words = self.grammar.mask().words().to_vec();
                if let Some(open) = self.gate.open
                    && let Some(w) = words.get_mut(open as usize / 32)
                {
                    *w |= 1 << (open % 32);
                }
                Mask::from_words(words)
            }
        }
    }
    fn accept(&mut self, token: u32) -> bool {
        let ok = match self.phase() {
            Phase::Answer => self.grammar.accept(token),
            Phase::Undecided if Some(token) == self.gate.open => true,
            Phase::Undecided => {
                let ok = self.grammar.accept(token);
                if ok {
                    self.answer_from = Some(0);
                }
                ok
            }
            Phase::Reasoning => {
                if token == self.gate.close {
                    self.answer_from = Some(self.taken + 1);
                }
                true
            }
        };
        self.taken += ok as usize;
        ok
    }
    fn rollback(&mut self, n: usize) {
        let to = self.taken - n.min(self.taken);
        if let Some(from) = self.answer_from {
            // The grammar took the tokens past `from`.
            self.grammar.rollback(self.taken - to.max(from));
            // Back before `</think>`, or to an undecided start.
            if to < from || to == 0 {
                self.answer_from = None;
            }
        }
        self.taken = to;
    }
    fn is_finished(&self) -> bool {
        self.phase() == Phase::Answer && self.grammar.is_finished()
    }
}

/// A compiled constraint with what starting a sequence on it needs.
#[derive(Clone)]
pub struct Prepared {
    kind: Kind,
    /// With a reasoning parser: a grammar holds on the answer alone.
    gate: Option<Gate>,
}

/// What a prepared constraint holds the output to.
#[derive(Clone)]
enum Kind {
    /// A compiled grammar.
    Grammar { grammars: Arc<Grammars>, compiled: Compiled, width: usize, eos: u32 },
    /// The same ids at every step (`allowed_token_ids`).
    Allowed(Mask),
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared")
    }
}

impl Prepared {
    /// A fresh constraint for one sequence.
    pub fn start(&self) -> Box<dyn Constraint> {
        let (grammars, compiled, width, eos) = match &self.kind {
            Kind::Grammar { grammars, compiled, width, eos } => (grammars, compiled, *width, *eos),
            Kind::Allowed(mask) => return Box::new(crate::allowed::Allowed::new(mask.clone())),
        };
        let grammar = GrammarConstraint { m: grammars.start(compiled), width, eos };
        match self.gate {
            Some(gate) => Box::new(AfterReasoning::new(grammar, gate, width)),
            None => Box::new(grammar),
        }
    }

    /// This constraint holding only after `gate`'s reasoning (unchanged for `None`); an allowed
    /// set holds on every token, the reasoning's too.
    pub fn after(self, gate: Option<Gate>) -> Prepared {
        Prepared { gate, ..self }
    }

    /// Only `mask`'s ids, at every step.
    pub fn allowed(mask: Mask) -> Prepared {
        Prepared { kind: Kind::Allowed(mask), gate: None }
    }
}

/// Compiles `spec` (from request field `field`) for this server's model: 400 naming the field
/// when it is invalid or past a cap.
pub fn prepare(st: &AppState, spec: &Spec, field: &str) -> Result<Prepared, ApiError> {
    let (grammars, eos) = st.grammars().map_err(|e| ApiError::invalid(field, e))?;
    let compiled = grammars.compile(spec).map_err(|e| refusal(field, e))?;
    Ok(Prepared { kind: Kind::Grammar { grammars, compiled, width: st.model.vocab.rows(), eos }, gate: None })
}

/// Checks `spec` (from request field `field`) against the caps without compiling it: 400
/// naming the field when it is past one or its references cycle with no base case.
pub fn check(st: &AppState, spec: &Spec, field: &str) -> Result<(), ApiError> {
    let (grammars, _) = st.grammars().map_err(|e| ApiError::invalid(field, e))?;
    grammars.check(spec).map_err(|e| refusal(field, e))
}

/// The 400 for `e`, naming `field`.
fn refusal(field: &str, e: GrammarError) -> ApiError {
    match e {
        GrammarError::Invalid(m) => ApiError::invalid(field, format!("invalid: {}", clip(&m))),
        GrammarError::TooLarge(m) => ApiError::invalid(field, format!("too large: {m}")),
        GrammarError::Timeout(ms) => ApiError::invalid(field, format!("took longer than {ms} ms to compile")),
    }
}

/// The start of a long compiler message.
fn clip(m: &str) -> String {
    match m.char_indices().nth(300) {
        Some((cut, _)) => format!("{}...", &m[..cut]),
        None => m.to_string(),
    }
}

/// The compiler of `st`'s model and the id that ends a constrained output, built from the
/// tokenizer.
pub(crate) fn build(st: &AppState) -> Result<(Arc<Grammars>, u32), String> {
    let tok = st.model.tokenizer.as_ref().ok_or("this model has no tokenizer, so no constraint can be compiled")?;
    compiler(tok, st.model.vocab.rows(), &st.model.eos_ids)
}

/// The grammar compiler over `tok`'s vocabulary (`rows` ids wide) and the id that ends a
/// constrained output (the tokenizer's EOS, else the first of `eos_ids`).
pub fn compiler(tok: &Tokenizer, rows: usize, eos_ids: &[u32]) -> Result<(Arc<Grammars>, u32), String> {
    let eos = tok
        .eos_id()
        .or_else(|| eos_ids.first().copied())
        .ok_or("this model has no end-of-sequence token, so a constrained output could not end")?;
    let json = tok.to_json().ok_or("the tokenizer could not be read")?;
    let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let bytes = tf_grammar::token_bytes(&value, rows).map_err(|e| e.to_string())?;
    let g = Grammars::new(&bytes, eos, tf_grammar::Limits::default()).map_err(|e| e.to_string())?;
    Ok((Arc::new(g), eos))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EOS: u32 = 256;
    const OPEN: u32 = 257;
    const CLOSE: u32 = 258;
    const WIDTH: usize = 259;

    /// `"ab"` as the only answer, over single bytes, an end and the two think tags.
    fn gated(open: Option<u32>) -> AfterReasoning {
        let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        bytes.extend([b"\xff<eos>".to_vec(), b"\xff<think>".to_vec(), b"\xff</think>".to_vec()]);
        let Ok(g) = Grammars::new(&bytes, EOS, tf_grammar::Limits::default()) else { panic!("grammars") };
        let Ok(c) = g.compile(&Spec::Choice(vec!["ab".into()])) else { panic!("compiles") };
        let grammar = GrammarConstraint::new(g.start(&c), WIDTH, EOS);
        AfterReasoning::new(grammar, Gate { open, close: CLOSE }, WIDTH)
    }

    fn allowed(c: &mut AfterReasoning) -> Vec<u32> {
        let m = c.mask();
        (0..WIDTH as u32).filter(|&i| m.allows(i)).collect()
    }

    #[test]
    fn the_grammar_holds_on_the_answer_alone() {
        let a = u32::from(b'a');
        let mut c = gated(Some(OPEN));
        assert_eq!(allowed(&mut c), [a, OPEN], "undecided: the answer's start or <think>");
        assert!(!c.accept(u32::from(b'b')) && !c.accept(CLOSE));
        assert!(c.accept(OPEN));
        assert_eq!(allowed(&mut c).len(), WIDTH, "reasoning: anything");
        for t in [u32::from(b'x'), OPEN, EOS - 1, CLOSE] {
            assert!(c.accept(t));
        }
        assert_eq!(allowed(&mut c), [a], "the answer, after </think>");
        assert!(!c.is_finished());
        assert!(c.accept(a) && c.accept(u32::from(b'b')));
        assert!(c.is_finished());
        // Back into the answer, then before </think>, then to the start.
        c.rollback(1);
        assert_eq!(allowed(&mut c), [u32::from(b'b')]);
        c.rollback(2);
        assert_eq!(allowed(&mut c).len(), WIDTH, "reasoning again");
        assert!(c.accept(CLOSE) && c.accept(a));
        c.rollback(6);
        assert_eq!(allowed(&mut c), [a, OPEN]);
        // An answer from the first token, and back.
        assert!(c.accept(a));
        assert_eq!(allowed(&mut c), [u32::from(b'b')]);
        assert!(!c.accept(OPEN));
        c.rollback(1);
        assert_eq!(allowed(&mut c), [a, OPEN]);
    }

    #[test]
    fn deepseek_r1_outputs_open_in_their_reasoning() {
        let mut c = gated(None);
        assert_eq!(allowed(&mut c).len(), WIDTH);
        assert!(c.accept(u32::from(b'z')) && c.accept(CLOSE));
        assert_eq!(allowed(&mut c), [u32::from(b'a')]);
        c.rollback(1);
        assert_eq!(allowed(&mut c).len(), WIDTH);
    }
}
