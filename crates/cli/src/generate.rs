//! `tensorfold generate`: prompt in, tokens out, streamed as text; tokens/s on stderr.

use crate::args::{GenerateArgs, parse_ids};
use crate::device::{OnBackend, dispatch};
use crate::exit::{Failure, failed, refused};
use serde_json::json;
use std::io::Write;
use std::time::Instant;
use tf_backend::Backend;
use tf_core::TokenIds;
use tf_engine::Runner;
use tf_engine::sampler::{History, SamplingParams, sample};
use tf_models::Model;
use tf_tokenize::{IncrementalDecoder, StopMatcher};

struct Generate<'a>(&'a GenerateArgs);

impl Generate<'_> {
    fn params(&self) -> Result<SamplingParams, Failure> {
        let a = self.0;
        let p = SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repetition_penalty: a.repetition_penalty,
            presence_penalty: a.presence_penalty,
            frequency_penalty: a.frequency_penalty,
            logit_bias: Vec::new(),
            seed: a.seed,
        };
        p.validate().map_err(refused)?;
        Ok(p)
    }

    fn prompt<B: Backend>(&self, m: &Model<B>) -> Result<TokenIds, Failure> {
        let a = self.0;
        let prompt = match (&a.ids, &a.prompt) {
            (Some(ids), _) => {
                m.vocab.check(&parse_ids(ids).map_err(refused)?).map_err(|e| refused(format!("--ids: {e}")))?
            }
            (None, Some(text)) => {
                let tok = m.tokenizer.as_ref().ok_or_else(|| refused("--prompt needs a tokenizer.json; use --ids"))?;
                tok.encode(text, true).map_err(refused)?
            }
            (None, None) => return Err(refused("give --prompt or --ids")),
        };
        let ctx = m.decoder.spec.max_position_embeddings;
        if prompt.is_empty() {
            return Err(refused("the prompt is empty"));
        }
        if prompt.len() >= ctx {
            return Err(refused(format!("the prompt's {} tokens leave no room in the context of {ctx}", prompt.len())));
        }
        Ok(prompt)
    }
}

impl OnBackend for Generate<'_> {
    type Out = ();
    fn run<B: Backend>(self, b: &B) -> Result<(), Failure> {
        let a = self.0;
        let params = self.params()?;
        let m = Model::open(&a.model, b).map_err(refused)?;
        let prompt = self.prompt(&m)?;
        let stop_ids = match &a.stop_ids {
            Some(s) => {
                m.vocab.check(&parse_ids(s).map_err(refused)?).map_err(|e| refused(format!("--stop-ids: {e}")))?
            }
            None => TokenIds::new(),
        };
        let max_tokens = a.max_tokens.min(m.decoder.spec.max_position_embeddings - prompt.len());
        let mut runner = Runner::new(&m, b, prompt.len() + max_tokens).map_err(refused)?;
        let tok = m.tokenizer.as_ref();
        let mut detok = IncrementalDecoder::new(prompt.as_slice(), true);
        let mut stops = StopMatcher::new(&a.stop);
        let (mut text, mut out) = (String::new(), std::io::stdout().lock());
        let mut emit = |piece: &str, text: &mut String| -> Result<(), Failure> {
            text.push_str(piece);
            if !a.json {
                out.write_all(piece.as_bytes()).and_then(|_| out.flush()).map_err(failed)?;
            }
            Ok(())
        };
        let t0 = Instant::now();
        let mut logits = if max_tokens > 0 { runner.prefill(&prompt, a.chunk, false) } else { Vec::new() };
        let prefill_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut history = History::new(&prompt);
        let mut generated = TokenIds::new();
        for i in 0..max_tokens {
            let id = sample(&mut logits, &params, &history, (prompt.len() + i) as u64);
            generated.push_sampled(id);
            history.push(id);
            if (!a.ignore_eos && m.eos_ids.contains(&id)) || stop_ids.as_slice().contains(&id) {
                break;
            }
            if let Some(t) = tok {
                let piece = detok.step(t, id).map_err(failed)?;
                let o = stops.push(&piece);
                emit(&o.text, &mut text)?;
                if o.stopped {
                    break;
                }
            }
            if i + 1 < max_tokens {
                logits = runner.feed(&[id], false);
            }
        }
        if let Some(t) = tok
            && !stops.is_stopped()
        {
            let rest = detok.finish(t).map_err(failed)?;
            let o = stops.push(&rest);
            emit(&o.text, &mut text)?;
            if !o.stopped {
                emit(&stops.finish(), &mut text)?;
            }
        }
        let decode_s = t1.elapsed().as_secs_f64();
        if a.json {
            let doc = json!({"prompt_ids": prompt.as_slice(), "ids": generated.as_slice(), "text": text});
            println!("{doc}");
        } else {
            println!();
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

/// Runs `generate`.
pub fn run(a: &GenerateArgs) -> Result<(), Failure> {
    dispatch(&a.dev, Generate(a))
}
