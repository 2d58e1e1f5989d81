//! Bounds on one chat-template render: minijinja's fuel (work: instructions and the data they
//! make) and the size of the rendered text, so a template that loops or grows without end is
//! refused quickly and frees its thread.

use minijinja::{Error, ErrorKind};
use std::io;

/// Fuel a render may burn when the server names no other budget: about a second of work on
/// one core, thousands of times what a long conversation through a usual template takes.
pub const DEFAULT_FUEL: u64 = 20_000_000;

/// Why a render failed.
#[derive(Debug)]
pub enum RenderError {
    /// It used up its fuel.
    OutOfFuel(u64),
    /// Its text passed the byte cap.
    TooLong(usize),
    /// The template failed on its own (a syntax error, `raise_exception`, ...).
    Template(Error),
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::OutOfFuel(fuel) => {
                write!(f, "the render passed its work budget of {fuel} fuel (--chat-template-fuel)")
            }
            RenderError::TooLong(max) => {
                write!(f, "the rendered prompt passed {max} bytes, more than the context could hold")
            }
            RenderError::Template(e) => write!(f, "{e}"),
        }
    }
}

/// Classifies a render error: the fuel and the byte cap against the template's own failures.
pub fn classify(e: Error, fuel: Option<u64>, max_bytes: usize) -> RenderError {
    match e.kind() {
        ErrorKind::OutOfFuel => RenderError::OutOfFuel(fuel.unwrap_or_default()),
        ErrorKind::WriteFailure => RenderError::TooLong(max_bytes),
        _ => RenderError::Template(e),
    }
}

/// A buffer that refuses a write past `max` bytes.
pub struct CappedWriter {
    /// What was written.
    pub buf: Vec<u8>,
    max: usize,
}

impl CappedWriter {
    /// An empty buffer holding at most `max` bytes.
    pub fn new(max: usize) -> CappedWriter {
        CappedWriter { buf: Vec::new(), max }
    }
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.max {
            return Err(io::Error::other("the rendered text passed its cap"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{ChatTemplate, TemplateInput};
    use minijinja::Value;
    use std::time::{Duration, Instant};

    fn input() -> TemplateInput {
        TemplateInput { messages: Value::from(()), tools: None, add_generation_prompt: false, extra: vec![] }
    }

    #[test]
    fn an_endless_loop_runs_out_of_fuel_quickly() {
        let src = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        let started = Instant::now();
        let e = t.render(input()).unwrap_err();
        assert!(matches!(e, RenderError::OutOfFuel(DEFAULT_FUEL)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(e.to_string().contains("--chat-template-fuel"), "{e}");
        let small = ChatTemplate::new("{% for i in range(1000) %}x{% endfor %}", None, None).unwrap();
        assert_eq!(small.render(input()).unwrap().len(), 1000);
        assert!(matches!(small.with_fuel(Some(100)).render(input()), Err(RenderError::OutOfFuel(100))));
    }

    #[test]
    fn text_past_the_cap_is_refused() {
        let t = ChatTemplate::new("{% for i in range(100) %}0123456789{% endfor %}", None, None).unwrap();
        assert_eq!(t.render_capped(input(), 1000).unwrap().len(), 1000);
        assert!(matches!(t.render_capped(input(), 999), Err(RenderError::TooLong(999))));
        let src =
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
        let doubling = ChatTemplate::new(src, None, None).unwrap();
        let e = doubling.render_capped(input(), usize::MAX).unwrap_err();
        assert!(matches!(e, RenderError::OutOfFuel(_)), "2^40 bytes are never built: {e}");
    }
}
