//! What `generate` prints, whichever way the tokens were made: generated ids become text through
//! the incremental detokenizer and the stop strings, streamed to stdout (or kept for `--json`),
//! then the JSON document or a newline, and the speed line on stderr.

use crate::exit::{Failure, failed};
use serde_json::json;
use std::io::{StdoutLock, Write};
use tf_core::TokenIds;
use tf_tokenize::{IncrementalDecoder, StopMatcher, Tokenizer};

/// Generated ids to text, streamed unless `--json`.
pub struct TextOut<'a> {
    tok: Option<&'a Tokenizer>,
    detok: IncrementalDecoder,
    stops: StopMatcher,
    json: bool,
    text: String,
    out: StdoutLock<'static>,
}

impl<'a> TextOut<'a> {
    /// Text after `prompt`, cut at the first of `stops`.
    pub fn new(tok: Option<&'a Tokenizer>, prompt: &TokenIds, stops: &[String], json: bool) -> TextOut<'a> {
        let detok = IncrementalDecoder::new(prompt.as_slice(), true);
        let out = std::io::stdout().lock();
        TextOut { tok, detok, stops: StopMatcher::new(stops), json, text: String::new(), out }
    }

    fn emit(&mut self, piece: &str) -> Result<(), Failure> {
        self.text.push_str(piece);
        if !self.json {
            self.out.write_all(piece.as_bytes()).and_then(|_| self.out.flush()).map_err(failed)?;
        }
        Ok(())
    }

    /// Adds the text of `id`; true when a stop string has ended the output.
    pub fn push(&mut self, id: u32) -> Result<bool, Failure> {
        let Some(t) = self.tok else { return Ok(false) };
        let piece = self.detok.step(t, id).map_err(failed)?;
        let o = self.stops.push(&piece);
        self.emit(&o.text)?;
        Ok(o.stopped)
    }

    /// Flushes the text held back, prints the JSON document (or a newline) and the speed line.
    pub fn finish(
        mut self,
        prompt: &TokenIds,
        generated: &TokenIds,
        prefill_s: f64,
        decode_s: f64,
    ) -> Result<(), Failure> {
        if let Some(t) = self.tok
            && !self.stops.is_stopped()
        {
            let rest = self.detok.finish(t).map_err(failed)?;
            let o = self.stops.push(&rest);
            self.emit(&o.text)?;
            if !o.stopped {
                let tail = self.stops.finish();
                self.emit(&tail)?;
            }
        }
        if self.json {
            let doc = json!({"prompt_ids": prompt.as_slice(), "ids": generated.as_slice(), "text": self.text});
            writeln!(self.out, "{doc}").map_err(failed)?;
        } else {
            writeln!(self.out).map_err(failed)?;
        }
        eprintln!(
            "prefill: {} tokens in {:.3}s ({:.1} tok/s); decode: {} tokens in {:.3}s ({:.2} tok/s)",
            prompt.len(),
            prefill_s,
            prompt.len() as f64 / prefill_s.max(1e-9),
            generated.len(),
            decode_s,
            generated.len() as f64 / decode_s.max(1e-9)
        );
        Ok(())
    }
}
