//! The trust boundary on the HTTP side: request fields to native, checked values. Every id from
//! outside (prompt ids, `logit_bias` keys, `stop_token_ids`, `allowed_token_ids`) goes through
//! `Vocab::check`; sampling values go through `SamplingParams::validate`; sizes are held to the
//! deployment's limits.

use crate::error::ApiError;
use crate::fields::{int_list, show};
use crate::state::AppState;
use crate::wire::chat::ChatFields;
use crate::wire::common::{NoOp, Run, Sampling, StreamOptions};
use crate::wire::completions::CompletionFields;
use serde_json::{Map, Value};
use tf_core::{BadToken, TokenIds};
use tf_engine::sampler::SamplingParams;

/// Which route a request came through (their fields differ a little).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

/// Generation options common to every prompt of a request, all checked.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sampling settings (validated); the seed is set per sequence.
    pub params: SamplingParams,
    /// The request's seed, if it gave one.
    pub seed: Option<u64>,
    /// Sequences per prompt.
    pub n: usize,
    /// Requested `max_tokens` (within `1..=max_tokens_limit`), if given.
    pub max_tokens: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stop ids (checked).
    pub stop_ids: TokenIds,
    /// Most prompt tokens kept, the last ones (`truncate_prompt_tokens`).
    pub truncate: Option<usize>,
    /// The only ids the output may hold (`allowed_token_ids`), as a mask over the rows.
    pub allowed: Option<tf_engine::constraint::Mask>,
    /// Keep going past EOS.
    pub ignore_eos: bool,
    /// Alternatives per token when logprobs are asked for.
    pub logprobs: Option<usize>,
    /// vLLM's `prompt_logprobs`: alternatives per prompt token.
    pub prompt_logprobs: Option<usize>,
    /// Score the prompt only (`max_tokens: 0` with prompt logprobs): nothing is generated.
    pub score_only: bool,
    /// Stream as server-sent events.
    pub stream: bool,
    /// Add a usage chunk at the end of a stream.
    pub include_usage: bool,
    /// Completions: prepend the prompt to the output.
    pub echo: bool,
    /// Report logprob tokens as `token_id:<id>` (vLLM's switch).
    pub tokens_as_ids: bool,
    /// Allow speculative decoding for this request.
    pub draft: bool,
    /// Keep the stop string that ended the text at its end.
    pub include_stop: bool,
    /// Leave special tokens out of the text.
    pub skip_special: bool,
}

impl Options {
    /// Alternatives per prompt token the engine must report: for `prompt_logprobs`, and for
    /// completions' `echo` with `logprobs` (the prompt's tokens lead the logprobs).
    pub fn engine_prompt_logprobs(&self) -> Option<usize> {
        let echoed = self.logprobs.filter(|_| self.echo);
        match (self.prompt_logprobs, echoed) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A prompt as the engine will see it, and its text when echoed.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// Checked ids.
    pub ids: TokenIds,
    /// The prompt as text (for `echo`).
    pub text: Option<String>,
}

/// Refuses a `model` other than the served one (absent is fine).
pub fn check_model(model: Option<&str>, st: &AppState) -> Result<(), ApiError> {
    match model {
        Some(name) if name != st.model.name => Err(ApiError::unknown_model(name)),
        _ => Ok(()),
    }
}

/// The route-specific fields [`parse_options`] reads.
pub enum RouteFields<'a> {
    /// `/v1/completions`.
    Completions(&'a CompletionFields),
    /// `/v1/chat/completions`.
    Chat(&'a ChatFields),
}

/// An integer field within `min..=max`.
pub fn count(v: Option<i64>, key: &str, min: i64, max: usize) -> Result<Option<usize>, ApiError> {
    let Some(x) = v else { return Ok(None) };
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    if x < min || x > max {
        return Err(ApiError::invalid(key, format!("{x} is out of range: expected {min} <= x <= {max}")));
    }
    Ok(Some(x as usize))
}

/// Reads and checks the generation options.
pub fn parse_options(
    st: &AppState,
    sampling: &Sampling,
    run: &Run,
    noop: &NoOp,
    route: RouteFields,
) -> Result<Options, ApiError> {
    let lim = &st.limits;
    crate::noop::check(noop)?;
    let mut params = sampling_params(sampling, st)?;
    let seed = sampling.seed.map(|s| s as u64);
    let n = count(run.n, "n", 1, lim.max_n)?.unwrap_or(1);
    let (max_tokens, logprobs, echo) = match route {
        RouteFields::Chat(c) => {
            let max_tokens = match c.max_completion_tokens {
                Some(m) => count(Some(m), "max_completion_tokens", 1, lim.max_tokens_limit)?,
                None => count(run.max_tokens, "max_tokens", 1, lim.max_tokens_limit)?,
            };
            (max_tokens, chat_logprobs(c, lim.max_logprobs)?, false)
        }
        RouteFields::Completions(c) => (
            count(run.max_tokens, "max_tokens", 0, lim.max_tokens_limit)?,
            count(c.logprobs, "logprobs", 0, lim.max_logprobs)?,
            c.echo.unwrap_or(false),
        ),
    };
    let stop = stop_strings(run.stop.as_ref(), lim.max_stop_strings)?;
    check_stop_bytes(&stop, lim.max_stop_bytes)?;
    let stop_ids = checked_ids(run.stop_token_ids.as_ref(), st, "stop_token_ids", lim.max_stop_strings)?;
    let truncate = match run.truncate_prompt_tokens {
        Some(-1) => Some(st.max_model_len()),
        Some(k) if k >= 1 && k as u64 <= st.max_model_len() as u64 => Some(k as usize),
        Some(k) => {
            let msg =
                format!("{k} is out of range: expected -1 (the context length) or 1 <= x <= {}", st.max_model_len());
            return Err(ApiError::invalid("truncate_prompt_tokens", msg));
        }
        None => None,
    };
    let rows = st.model.vocab.rows();
    let allowed_ids = match run.allowed_token_ids.as_ref().filter(|v| !v.is_null()) {
        Some(v) => {
            let ids = checked_ids(Some(v), st, "allowed_token_ids", rows)?;
            if ids.is_empty() {
                return Err(ApiError::invalid("allowed_token_ids", "must not be empty"));
            }
            Some(ids)
        }
        None => None,
    };
    let allowed =
        allowed_ids.as_ref().map(|ids| tf_engine::constraint::Mask::from_ids(rows, ids.as_slice().iter().copied()));
    let ignore_eos = run.ignore_eos.unwrap_or(false);
    // Until `min_tokens` are out, neither EOS (unless ignored) nor a stop id can be drawn.
    params.min_tokens =
        count(run.min_tokens, "min_tokens", 0, max_tokens.unwrap_or(lim.max_tokens_limit))?.unwrap_or(0);
    if params.min_tokens > 0 {
        params.suppress = stop_ids.as_slice().to_vec();
        if !ignore_eos {
            params.suppress.extend(&st.model.eos_ids);
        }
        params.suppress.sort_unstable();
        params.suppress.dedup();
    }
    // Before min_tokens, an allowed set of ends alone (EOS, stop ids) would leave nothing to draw.
    if let Some(ids) = &allowed_ids
        && params.min_tokens > 0
        && ids.as_slice().iter().all(|i| params.suppress.binary_search(i).is_ok())
    {
        let msg = "every allowed id ends the text (EOS or a stop id), which min_tokens holds back";
        return Err(ApiError::invalid("allowed_token_ids", msg));
    }
    let stream = run.stream.unwrap_or(false);
    let include_usage = include_usage(run.stream_options.as_ref())?;
    let prompt_logprobs = count(run.prompt_logprobs, "prompt_logprobs", 0, lim.max_logprobs)?;
    let scored = prompt_logprobs.is_some() || (echo && logprobs.is_some());
    if max_tokens == Some(0) && !scored {
        return Err(ApiError::invalid(
            "max_tokens",
            "0 is allowed only to score the prompt (echo with logprobs, or prompt_logprobs)",
        ));
    }
    if scored && stream {
        let field = if prompt_logprobs.is_some() { "prompt_logprobs" } else { "echo" };
        return Err(ApiError::invalid(field, "prompt logprobs are not streamed; send stream: false"));
    }
    Ok(Options {
        // Speculative decoding when the server runs a drafter; output is identical either way.
        draft: run.draft.unwrap_or(true),
        params,
        seed,
        n,
        max_tokens,
        stop,
        stop_ids,
        truncate,
        allowed,
        ignore_eos,
        logprobs,
        prompt_logprobs,
        score_only: max_tokens == Some(0),
        stream,
        include_usage,
        echo,
        tokens_as_ids: run.return_tokens_as_token_ids.unwrap_or(false),
        include_stop: run.include_stop_str_in_output.unwrap_or(false),
        skip_special: run.skip_special_tokens.unwrap_or(true),
    })
}

/// `stream_options`: `include_usage`, and vLLM's `continuous_usage_stats` when off (usage on
/// every chunk is not supported).
fn include_usage(so: Option<&StreamOptions>) -> Result<bool, ApiError> {
    let Some(so) = so else { return Ok(false) };
    if so.continuous_usage_stats == Some(true) {
        return Err(ApiError::invalid(
            "stream_options.continuous_usage_stats",
            "usage on every chunk is not supported; use include_usage for a final usage chunk",
        ));
    }
    Ok(so.include_usage.unwrap_or(false))
}

/// `stop`: a string or a list of strings, at most `max`.
fn stop_strings(v: Option<&Value>, max: usize) -> Result<Vec<String>, ApiError> {
    let key = "stop";
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => {
                    Err(ApiError::invalid(format!("{key}[{i}]"), format!("expected a string, got {}", show(other))))
                }
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ApiError::invalid(key, format!("expected a string or a list of strings, got {}", show(v))));
        }
    };
    if list.len() > max {
        return Err(ApiError::invalid(key, format!("{} entries; at most {max} are allowed", list.len())));
    }
    Ok(list)
}

/// Refuses stop strings whose bytes together pass `max` (every output piece is matched against
/// all of them): 400 naming `stop`.
fn check_stop_bytes(stop: &[String], max: usize) -> Result<(), ApiError> {
    let total: usize = stop.iter().map(String::len).sum();
    if total > max {
        let msg = format!("{total} bytes of stop strings; at most {max} are allowed (--max-stop-bytes)");
        return Err(ApiError::invalid("stop", msg));
    }
    Ok(())
}

/// Chat's `logprobs` (bool) and `top_logprobs` (count, only with `logprobs: true`).
fn chat_logprobs(c: &ChatFields, max: usize) -> Result<Option<usize>, ApiError> {
    let on = c.logprobs.unwrap_or(false);
    let top = count(c.top_logprobs, "top_logprobs", 0, max)?;
    match (on, top) {
        (false, Some(_)) => Err(ApiError::invalid("top_logprobs", "needs \"logprobs\": true")),
        (false, None) => Ok(None),
        (true, top) => Ok(Some(top.unwrap_or(0))),
    }
}

/// Sampling settings with OpenAI's defaults (temperature 1, top_p 1), validated.
pub fn sampling_params(o: &Sampling, st: &AppState) -> Result<SamplingParams, ApiError> {
    let rows = st.model.vocab.rows();
    let f = |v: Option<f64>, default: f32| v.map_or(default, |x| x as f32);
    let top_k = match o.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k >= 1 && k as usize <= rows => k as u32,
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("{k} is out of range: expected -1 or 0 (off) or 1..={rows}"),
            ));
        }
    };
    let p = SamplingParams {
        temperature: f(o.temperature, 1.0),
        top_k,
        top_p: f(o.top_p, 1.0),
        min_p: f(o.min_p, 0.0),
        repetition_penalty: f(o.repetition_penalty, 1.0),
        presence_penalty: f(o.presence_penalty, 0.0),
        frequency_penalty: f(o.frequency_penalty, 0.0),
        logit_bias: logit_bias(o.logit_bias.as_ref(), st)?,
        ..SamplingParams::default()
    };
    p.validate()
        .map_err(|e| ApiError::invalid(e.field, format!("{} is out of range: expected {}", e.value, e.expected)))?;
    Ok(p)
}

/// `logit_bias`: keys are token ids as strings (checked), values finite in [-100, 100].
fn logit_bias(map: Option<&Map<String, Value>>, st: &AppState) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(map) = map else { return Ok(Vec::new()) };
    if map.len() > st.limits.max_logit_bias {
        let msg = format!("{} entries; at most {} are allowed", map.len(), st.limits.max_logit_bias);
        return Err(ApiError::invalid("logit_bias", msg));
    }
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let raw: i64 = key
            .trim()
            .parse()
            .map_err(|_| ApiError::invalid("logit_bias", format!("key {key:?} is not an integer token id")))?;
        let id = st.model.vocab.check_one(raw).map_err(|e| ApiError::invalid("logit_bias", bad_id(&e)))?;
        let bias = value.as_f64().ok_or_else(|| {
            ApiError::invalid("logit_bias", format!("value for {key:?} is not a number: {}", show(value)))
        })?;
        out.push((id, bias as f32));
    }
    Ok(out)
}

/// A list field of token ids (at most `max`), each checked against the vocabulary.
fn checked_ids(v: Option<&Value>, st: &AppState, key: &str, max: usize) -> Result<TokenIds, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(TokenIds::new()) };
    let raw = int_list(v, key)?;
    if raw.len() > max {
        return Err(ApiError::invalid(key, format!("{} entries; at most {max} are allowed", raw.len())));
    }
    st.model.vocab.check(&raw).map_err(|e| ApiError::invalid(format!("{key}[{}]", e.index), bad_id(&e)))
}

/// The message for an id outside the vocabulary.
pub fn bad_id(e: &BadToken) -> String {
    format!("token id {} is outside the vocabulary (0..{})", e.id, e.rows)
}

/// The prompts of a completions request (`prompt` or `prompt_token_ids`): a text, a list of
/// ids, or a batch of either; each checked and tokenized, then cut to its last `truncate` ids
/// where given (`truncate_prompt_tokens`).
pub fn parse_prompts(c: &CompletionFields, st: &AppState, truncate: Option<usize>) -> Result<Vec<Prompt>, ApiError> {
    let nonnull = |v: &Option<Value>| v.as_ref().filter(|v| !v.is_null()).cloned();
    let (key, v) = match (nonnull(&c.prompt), nonnull(&c.prompt_token_ids)) {
        (Some(_), Some(_)) => return Err(both_prompts()),
        (Some(v), None) => ("prompt", v),
        (None, Some(v)) => ("prompt_token_ids", v),
        (None, None) => return Err(ApiError::invalid("prompt", "is required")),
    };
    let prompts = match &v {
        Value::String(text) => vec![text_prompt(st, key, text, truncate)?],
        Value::Array(items) if items.is_empty() => return Err(ApiError::invalid(key, "must not be empty")),
        Value::Array(items) => match &items[0] {
            Value::String(_) => items
                .iter()
                .enumerate()
                .map(|(i, t)| match t {
                    Value::String(text) => text_prompt(st, &format!("{key}[{i}]"), text, truncate),
                    other => {
                        Err(ApiError::invalid(format!("{key}[{i}]"), format!("expected a string, got {}", show(other))))
                    }
                })
                .collect::<Result<_, _>>()?,
            Value::Array(_) => items
                .iter()
                .enumerate()
                .map(|(i, ids)| id_prompt(st, &format!("{key}[{i}]"), ids, truncate))
                .collect::<Result<_, _>>()?,
            _ => vec![id_prompt(st, key, &v, truncate)?],
        },
        other => {
            let msg = format!("expected a string, a list of token ids or a batch of either, got {}", show(other));
            return Err(ApiError::invalid(key, msg));
        }
    };
    if prompts.len() > st.limits.max_n {
        return Err(ApiError::invalid(
            key,
            format!("{} prompts; at most {} are allowed", prompts.len(), st.limits.max_n),
        ));
    }
    Ok(prompts)
}

/// `prompt` and `prompt_token_ids` both given: ambiguous, 400 naming both.
pub fn both_prompts() -> ApiError {
    ApiError::invalid("prompt", "give prompt or prompt_token_ids, not both (prompt, prompt_token_ids)")
}

fn id_prompt(st: &AppState, key: &str, v: &Value, truncate: Option<usize>) -> Result<Prompt, ApiError> {
    let raw = int_list(v, key)?;
    let ids = st.model.vocab.check(&raw).map_err(|e| ApiError::invalid(format!("{key}[{}]", e.index), bad_id(&e)))?;
    kept(st, key, Prompt { ids, text: None }, truncate)
}

fn text_prompt(st: &AppState, key: &str, text: &str, truncate: Option<usize>) -> Result<Prompt, ApiError> {
    let ids = encode(st, key, text, true)?;
    kept(st, key, Prompt { ids, text: Some(text.to_string()) }, truncate)
}

/// `p` cut to its last `truncate` ids where it is longer (its text then no longer stands for
/// it), then checked for length.
fn kept(st: &AppState, key: &str, mut p: Prompt, truncate: Option<usize>) -> Result<Prompt, ApiError> {
    if let Some(k) = truncate.filter(|&k| p.ids.len() > k) {
        p.ids.keep_last(k);
        p.text = None;
    }
    check_prompt_len(st, key, p.ids.len())?;
    Ok(p)
}

/// Tokenizes a client's text, special-token spellings kept as plain text (SECURITY-CASES 8; ids
/// come out checked: the tokenizer was validated at load). A text too long in bytes to fit the
/// context is refused before tokenizing.
pub fn encode(st: &AppState, key: &str, text: &str, add_special_tokens: bool) -> Result<TokenIds, ApiError> {
    check_prompt_bytes(st, key, text.len())?;
    let tok = st
        .model
        .tokenizer
        .as_ref()
        .ok_or_else(|| ApiError::invalid(key, "this model has no tokenizer; send token ids"))?;
    tok.encode_literal(text, add_special_tokens).map_err(|e| ApiError::invalid(key, e.to_string()))
}

/// Refuses a text of `len` bytes past [`AppState::max_prompt_bytes`] without tokenizing it.
pub fn check_prompt_bytes(st: &AppState, key: &str, len: usize) -> Result<(), ApiError> {
    let max = st.max_prompt_bytes();
    if len > max {
        let msg = format!(
            "{len} bytes; a prompt over {max} bytes ({} bytes a token of room, --prompt-bytes-per-token) cannot fit the context",
            st.limits.prompt_bytes_per_token
        );
        return Err(ApiError::invalid(key, msg));
    }
    Ok(())
}

/// Refuses an empty prompt or one that leaves no room in the context.
pub fn check_prompt_len(st: &AppState, key: &str, len: usize) -> Result<(), ApiError> {
    let ctx = st.max_model_len();
    if len == 0 {
        return Err(ApiError::invalid(key, "the prompt is empty"));
    }
    if len > st.limits.max_prompt_tokens {
        return Err(ApiError::invalid(
            key,
            format!("{len} tokens; at most {} are allowed", st.limits.max_prompt_tokens),
        ));
    }
    if len >= ctx {
        return Err(ApiError::invalid(key, format!("{len} tokens leave no room in the context of {ctx} tokens")));
    }
    Ok(())
}

/// Refuses `num_seqs` sequences (`n` times the prompts) when the engine could never run them
/// all at once: 400 naming `n`, since retrying (429) would never help. Each sequence's own fit
/// in the KV cache is checked with its prompt and `max_tokens`.
pub fn check_fan_out(st: &AppState, num_seqs: usize, n: usize) -> Result<(), ApiError> {
    let cap = st.limits.max_num_seqs;
    if num_seqs <= cap {
        return Ok(());
    }
    let prompts = num_seqs / n.max(1);
    let msg = format!(
        "{n} x {prompts} prompt(s) = {num_seqs} sequences, but the engine runs at most {cap} at once (--max-num-seqs)"
    );
    Err(ApiError::invalid("n", msg))
}

/// Tokens to generate for a prompt: the request's `max_tokens` (refused if it does not fit)
/// or `default` (clipped to what is left of the context).
pub fn max_tokens_for(
    st: &AppState,
    opts: &Options,
    prompt_len: usize,
    default: usize,
    api: Api,
) -> Result<usize, ApiError> {
    let left = st.max_model_len().saturating_sub(prompt_len);
    match opts.max_tokens {
        Some(m) if m > left => {
            let field = if api == Api::Chat { "max_completion_tokens" } else { "max_tokens" };
            let msg = format!(
                "{m} tokens requested, but the context holds {} and the prompt has {prompt_len}: at most {left} are left",
                st.max_model_len()
            );
            Err(ApiError::invalid(field, msg))
        }
        Some(m) => Ok(m.max(1)),
        None => Ok(default.min(left).min(st.limits.max_tokens_limit).max(1)),
    }
}

/// The seed of sequence `i` of a request: the request's for the first, a mix of it for the
/// others (so `n > 1` gives different samples), a fresh draw when the request gave none.
pub fn seed_for(st: &AppState, seed: Option<u64>, i: usize) -> u64 {
    match seed {
        Some(s) if i == 0 => s,
        Some(s) => splitmix64(s ^ splitmix64(i as u64)),
        None => st.random_u64(),
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
