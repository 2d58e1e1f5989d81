//! Compiling a [`Spec`] against a vocabulary: caps checked first, the compile itself on a worker
//! thread given at most [`Limits::timeout`] (a compile past it is refused; its thread finishes
//! on its own, bounded by llguidance's fuel limits) and a stack sized for the byte cap, a
//! constraint that matches no output refused, results cached by content in an LRU bounded in
//! entries and estimated bytes.

use crate::cache::Lru;
use crate::caps::{check, estimate};
use crate::matcher::SeqMatcher;
use crate::{GrammarError, Spec};
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Caps on what a request may ask to compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a schema (as JSON), regex, grammar or choice list.
    pub max_bytes: usize,
    /// Nesting depth of a schema's objects and lists.
    pub max_depth: usize,
    /// References followed in a row: a schema's `$ref` chain, a Lark grammar's chain of rules
    /// (or tokens) each naming the next. The compiler recurses once per link.
    pub max_ref_depth: usize,
    /// Time a compile may take.
    pub timeout: Duration,
    /// Compiled grammars kept.
    pub cache_entries: usize,
    /// Estimated bytes of compiled grammars kept (keys included).
    pub cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: 64 * 1024,
            max_depth: 32,
            max_ref_depth: 128,
            timeout: Duration::from_secs(5),
            cache_entries: 256,
            cache_bytes: 512 << 20,
        }
    }
}

impl Limits {
    /// The compile thread's stack: 1 KiB per byte of `max_bytes` (64 MiB at the default), at
    /// least 8 MiB. The deepest grammars that fit in 64 KiB measured at most 17 MiB (a chain of
    /// 6,000 Lark rules; 2,300 `$ref`s took 7 MiB), so even a chain the depth checks cannot see
    /// (an `$id` chain, a schema inside a Lark grammar) stays within it; the deepest within
    /// `max_ref_depth` (128 `$ref`s, each through 14 nested objects) took 10 MiB.
    fn stack_bytes(&self) -> usize {
        self.max_bytes.saturating_mul(1024).max(8 << 20)
    }
}

/// A compiled constraint, ready to start sequences from (cheap to clone).
#[derive(Clone)]
pub struct Compiled {
    fresh: Arc<Mutex<Matcher>>,
}

/// The compiler of one model's vocabulary, with its cache.
pub struct Grammars {
    factory: Arc<ParserFactory>,
    cache: Mutex<Lru<Compiled>>,
    limits: Limits,
    width: usize,
}

impl Grammars {
    /// A compiler for a vocabulary of `token_bytes.len()` ids (`vocab::token_bytes`), `eos` being
    /// the id that ends a finished grammar's output.
    pub fn new(token_bytes: &[Vec<u8>], eos: u32, limits: Limits) -> Result<Grammars, GrammarError> {
        let width = token_bytes.len();
        if eos as usize >= width {
            return Err(GrammarError::Invalid(format!("end-of-sequence id {eos} is not below {width}")));
        }
        let trie = TokTrie::from(&TokRxInfo::new(width as u32, eos), token_bytes);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Invalid(e.to_string()))?;
        factory.quiet();
        let cache = Mutex::new(Lru::new(limits.cache_entries, limits.cache_bytes));
        Ok(Grammars { factory: Arc::new(factory), cache, limits, width })
    }

    /// The caps in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Checks `spec` against the caps without compiling it.
    pub fn check(&self, spec: &Spec) -> Result<(), GrammarError> {
        check(spec, &self.limits)
    }

    /// Compiles `spec` (or takes it from the cache).
    pub fn compile(&self, spec: &Spec) -> Result<Compiled, GrammarError> {
        let lim = self.limits;
        check(spec, &lim)?;
        let key = spec.key();
        if let Some(c) = self.cache.lock().ok().and_then(|mut c| c.get(&key)) {
            return Ok(c);
        }
        let grammar = spec.grammar()?;
        let start = std::time::Instant::now();
        let (tx, rx) = channel();
        let factory = self.factory.clone();
        let json = matches!(spec, Spec::JsonSchema(_) | Spec::JsonObject);
        let thread = std::thread::Builder::new().name("tensorfold-grammar".into()).stack_size(lim.stack_bytes());
        let worker = thread.spawn(move || {
            let m = factory.create_parser(grammar).map(|p| Matcher::new(Ok(p))).map_err(|e| e.to_string());
            let _ = tx.send(m.and_then(|m| matches_something(m, json)));
        });
        worker.map_err(|e| GrammarError::Invalid(format!("could not start the compiler: {e}")))?;
        let m = match rx.recv_timeout(lim.timeout) {
            // A result can be waiting before this thread first looks: the cap is on the compile's
            // time, not on the wait.
            Ok(_) if start.elapsed() > lim.timeout => {
                return Err(GrammarError::Timeout(lim.timeout.as_millis() as u64));
            }
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Err(GrammarError::Invalid(e)),
            Err(RecvTimeoutError::Timeout) => return Err(GrammarError::Timeout(lim.timeout.as_millis() as u64)),
            Err(RecvTimeoutError::Disconnected) => return Err(GrammarError::Invalid("the compiler failed".into())),
        };
        let c = Compiled { fresh: Arc::new(Mutex::new(m)) };
        if let Ok(mut cache) = self.cache.lock() {
            cache.put(key, c.clone(), estimate(spec));
        }
        Ok(c)
    }

    /// A matcher at the start of `c`'s output.
    pub fn start(&self, c: &Compiled) -> SeqMatcher {
        let m = match c.fresh.lock() {
            Ok(m) => m.clone(),
            Err(p) => p.into_inner().clone(),
        };
        SeqMatcher::new(m, self.width)
    }

    /// Compiled grammars in the cache.
    pub fn cached(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    /// Estimated bytes of the compiled grammars in the cache.
    pub fn cached_bytes(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.bytes())
    }
}

/// `m`, unless its grammar matches no output: its first step fails, or (for JSON, which is never
/// empty) allows nothing but the end. A `$ref` cycle with no base case compiles to that.
fn matches_something(m: Matcher, json: bool) -> Result<Matcher, String> {
    if let Some(e) = m.get_error() {
        return Err(e);
    }
    let mut first = m.clone();
    let eos = first.tok_env().map(|e| e.tok_trie().eos_token()).ok();
    let allowed =
        first.compute_mask().map(|v| (0..v.len() as u32).any(|t| v.is_allowed(t) && (!json || Some(t) != eos)));
    match allowed {
        Ok(true) => Ok(m),
        _ if !json && first.is_accepting().unwrap_or(false) => Ok(m),
        _ => Err("matches no output (a $ref cycle with no base case, or constraints that contradict)".into()),
    }
}
