//! `tensorfold generate`: prompt in, tokens out, streamed as text; tokens/s on stderr.

use crate::args::{GenerateArgs, parse_ids};
use crate::device::{OnBackend, dispatch};
use crate::exit::{Failure, refused};
use crate::gen_text::TextOut;
use std::time::Instant;
use tf_backend::Backend;
use tf_core::TokenIds;
use tf_engine::Runner;
use tf_engine::sampler::{History, SamplingParams, sample};
use tf_models::Model;
use tf_models::tp::GroupShape;

/// `generate`'s arguments, checked against the model.
pub struct Generate<'a>(pub &'a GenerateArgs);

impl Generate<'_> {
    /// The validated sampling settings.
    pub fn params(&self) -> Result<SamplingParams, Failure> {
        let a = self.0;
        let p = SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repetition_penalty: a.repetition_penalty,
            presence_penalty: a.presence_penalty,
            frequency_penalty: a.frequency_penalty,
            seed: a.seed,
            ..SamplingParams::default()
        };
        let flag = |e: tf_engine::sampler::ParamError| {
            format!("--{} {} is out of range: expected {}", e.field.replace('_', "-"), e.value, e.expected)
        };
        p.validate().map_err(|e| refused(flag(e)))?;
        Ok(p)
    }

    /// The checked prompt, refused when empty or filling the context.
    pub fn prompt<B: Backend>(&self, m: &Model<B>) -> Result<TokenIds, Failure> {
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

    /// The checked `--stop-ids`.
    pub fn stop_ids<B: Backend>(&self, m: &Model<B>) -> Result<TokenIds, Failure> {
        match &self.0.stop_ids {
            Some(s) => m.vocab.check(&parse_ids(s).map_err(refused)?).map_err(|e| refused(format!("--stop-ids: {e}"))),
            None => Ok(TokenIds::new()),
        }
    }

    /// `--max-tokens`, cut to what the context leaves after `prompt`.
    pub fn max_tokens<B: Backend>(&self, m: &Model<B>, prompt: &TokenIds) -> usize {
        self.0.max_tokens.min(m.decoder.spec.max_position_embeddings - prompt.len())
    }

    /// Whether `id` ends the output (EOS unless `--ignore-eos`, or a stop id); its text is not shown.
    pub fn ends(&self, eos_ids: &[u32], stop_ids: &TokenIds, id: u32) -> bool {
        (!self.0.ignore_eos && eos_ids.contains(&id)) || stop_ids.as_slice().contains(&id)
    }
}

impl OnBackend for Generate<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, b: &B) -> Result<(), Failure> {
        let a = self.0;
        let params = self.params()?;
        let dev = crate::tp::rank_device(&a.dev, a.tensor_parallel_size)?;
        let shape = GroupShape { size: a.tensor_parallel_size, expert_parallel: a.enable_expert_parallel };
        let mut m = crate::tp::open(&a.model, b, &Default::default(), &dev, shape)?;
        crate::load::cap_context(&mut m, a.max_model_len.map(|n| n as u64))?;
        let prompt = self.prompt(&m)?;
        let stop_ids = self.stop_ids(&m)?;
        let max_tokens = self.max_tokens(&m, &prompt);
        let mut runner = Runner::new(&m, b, prompt.len() + max_tokens).map_err(refused)?;
        let mut out = TextOut::new(m.tokenizer.as_ref(), &prompt, &a.stop, a.json);
        let t0 = Instant::now();
        let mut logits = if max_tokens > 0 { runner.prefill(&prompt, a.chunk, false) } else { Vec::new() };
        let prefill_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut history = History::new(&prompt);
        let mut generated = TokenIds::new();
        for i in 0..max_tokens {
            crate::tp::healthy(&m)?;
            let id = sample(&mut logits, &params, &history, (prompt.len() + i) as u64);
            generated.push_sampled(id);
            history.push(id);
            if self.ends(&m.eos_ids, &stop_ids, id) || out.push(id)? {
                break;
            }
            if i + 1 < max_tokens {
                logits = runner.feed(&[id], false);
            }
        }
        out.finish(&prompt, &generated, prefill_s, t1.elapsed().as_secs_f64())
    }
}

/// Runs `generate` (through the engine when `--session` is given).
pub fn run(a: &GenerateArgs) -> Result<(), Failure> {
    match a.session {
        Some(_) => crate::generate_session::run(a),
        None => dispatch(&crate::tp::rank_device(&a.dev, a.tensor_parallel_size)?, Generate(a)),
    }
}
