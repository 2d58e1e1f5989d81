//! A request's compiled constraint as the engine's [`Constraint`]: the grammar compiler is built
//! once per server from the tokenizer's vocabulary (on first use), compiles on the HTTP side
//! (request preparation's blocking thread, capped in size, nesting, reference depth and time:
//! tf-grammar), and each sequence gets its own matcher. A matcher that fails allows only the end
//! of sequence.

use crate::error::ApiError;
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

/// A compiled constraint with what starting a sequence on it needs.
#[derive(Clone)]
pub struct Prepared {
    grammars: Arc<Grammars>,
    compiled: Compiled,
    width: usize,
    eos: u32,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared")
    }
}

impl Prepared {
    /// A fresh constraint for one sequence.
    pub fn start(&self) -> Box<dyn Constraint> {
        Box::new(GrammarConstraint { m: self.grammars.start(&self.compiled), width: self.width, eos: self.eos })
    }
}

/// Compiles `spec` (from request field `field`) for this server's model: 400 naming the field
/// when it is invalid or past a cap.
pub fn prepare(st: &AppState, spec: &Spec, field: &str) -> Result<Prepared, ApiError> {
    let (grammars, eos) = st.grammars().map_err(|e| ApiError::invalid(field, e))?;
    let compiled = grammars.compile(spec).map_err(|e| refusal(field, e))?;
    Ok(Prepared { grammars, compiled, width: st.model.vocab.rows(), eos })
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
