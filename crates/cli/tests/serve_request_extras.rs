//! vLLM's request extras: `min_tokens` (EOS and stop ids cannot end the text before it),
//! `include_stop_str_in_output`, `skip_special_tokens`, `allowed_token_ids`, and their bad values
//! refused by name.

mod serve_util;

use serde_json::{Value, json};
use serve_util::Server;

/// The served fixture's EOS (`<eos>`) and another special token (`<|im_end|>`); text that spells
/// them is tokenized as text, so tests force them by id.
const EOS: u32 = 2;
const IM_END: u32 = 4;

/// A greedy completion of "ab" with `extra` fields: its text and token ids.
fn complete(s: &Server, extra: Value) -> (String, Vec<u32>, Value) {
    let mut body = json!({"model": "tiny", "prompt": "ab", "max_tokens": 8, "temperature": 0, "logprobs": 0,
                          "return_tokens_as_token_ids": true});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let c = r.json()["choices"][0].clone();
    let ids = c["logprobs"]["tokens"].as_array().expect("tokens").iter();
    let ids = ids.map(|t| t.as_str().and_then(|t| t.strip_prefix("token_id:")).expect("an id").parse().expect("u32"));
    (c["text"].as_str().expect("text").to_string(), ids.collect(), c["finish_reason"].clone())
}

#[test]
fn min_tokens_keeps_stop_ids_and_eos_from_ending_the_text_early() {
    let s = Server::start(&[]);
    let (_, free, _) = complete(&s, json!({}));
    // The first token as a stop id ends the text at once.
    let (_, ids, finish) = complete(&s, json!({"stop_token_ids": [free[0]]}));
    assert_eq!((ids.len(), finish), (0, json!("stop")));
    // With min_tokens 3 it cannot come before the fourth token.
    let (_, ids, _) = complete(&s, json!({"stop_token_ids": [free[0]], "min_tokens": 3}));
    assert!(ids.len() >= 3 && !ids[..3].contains(&free[0]), "{ids:?} (first free token {})", free[0]);
    // EOS likewise: forced by a bias, it cannot end the text before min_tokens.
    let bias = json!({"logit_bias": {EOS.to_string(): 100}, "min_tokens": 5});
    let (_, ids, finish) = complete(&s, bias);
    assert_eq!((ids.len(), finish), (5, json!("stop")), "{ids:?}");
    for (bad, why) in [(json!(9), "9 is out of range"), (json!(-1), "-1 is out of range")] {
        let r = s.post("/v1/completions", &json!({"prompt": "ab", "max_tokens": 8, "min_tokens": bad}));
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("min_tokens") && r.text().contains(why), "{}", r.text());
    }
}

#[test]
fn include_stop_str_in_output_keeps_the_stop_string() {
    let s = Server::start(&[]);
    let (text, _, _) = complete(&s, json!({"max_tokens": 16}));
    let stop: String = text.chars().skip(3).take(2).collect();
    let at = text.find(&stop).expect("the stop is in the text");
    let (cut, _, finish) = complete(&s, json!({"max_tokens": 16, "stop": [stop]}));
    assert_eq!((cut.as_str(), finish), (&text[..at], json!("stop")));
    let (kept, _, _) = complete(&s, json!({"max_tokens": 16, "stop": [stop], "include_stop_str_in_output": true}));
    assert_eq!(kept, text[..at + stop.len()]);
}

#[test]
fn skip_special_tokens_false_keeps_special_tokens_in_the_text() {
    let s = Server::start(&[]);
    let forced = json!({"logit_bias": {IM_END.to_string(): 100}, "max_tokens": 2});
    let (text, ids, _) = complete(&s, forced.clone());
    assert_eq!((text.as_str(), ids.len()), ("", 2), "skipped by default");
    let mut shown = forced;
    shown["skip_special_tokens"] = json!(false);
    assert_eq!(complete(&s, shown).0, "<|im_end|><|im_end|>");
}

#[test]
fn allowed_token_ids_hold_every_token_greedy_sampled_and_drafted() {
    let s = Server::start(&[]);
    let (_, free, _) = complete(&s, json!({}));
    // Ids the greedy text never picks: every token is one of them, whatever the sampling.
    let allowed: Vec<u32> = (100..400).filter(|i| !free.contains(i)).step_by(37).collect();
    for extra in [
        json!({"allowed_token_ids": allowed}),
        json!({"allowed_token_ids": allowed, "temperature": 1.0, "seed": 7}),
        json!({"allowed_token_ids": allowed, "draft": false}),
        json!({"allowed_token_ids": allowed, "logit_bias": {EOS.to_string(): 100}}),
    ] {
        let (_, ids, finish) = complete(&s, extra.clone());
        assert_eq!((ids.len(), finish), (8, json!("length")), "{extra}");
        assert!(ids.iter().all(|i| allowed.contains(i)), "{extra}: {ids:?} outside {allowed:?}");
    }
    // The chat route holds them too.
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                      "allowed_token_ids": [EOS], "logprobs": true});
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["finish_reason"], json!("stop"), "{}", r.text());
    // Refused by name: empty, outside the vocabulary, not ids, beside a constraint.
    for (bad, why) in [
        (json!({"allowed_token_ids": []}), "must not be empty"),
        (json!({"allowed_token_ids": [1, 512]}), "outside the vocabulary"),
        (json!({"allowed_token_ids": [1.5]}), ""),
        (json!({"allowed_token_ids": [5], "response_format": {"type": "json_object"}}), "no other constraint"),
        (json!({"allowed_token_ids": [EOS], "min_tokens": 2}), "min_tokens holds back"),
    ] {
        let mut body = json!({"model": "tiny", "prompt": "ab", "max_tokens": 2});
        for (k, v) in bad.as_object().expect("an object") {
            body[k] = v.clone();
        }
        let r = s.post("/v1/completions", &body);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        let param = r.json()["error"]["param"].as_str().unwrap_or_default().to_string();
        assert!(param.starts_with("allowed_token_ids"), "{bad}: {}", r.text());
        assert!(r.text().contains(why), "{bad}: {}", r.text());
    }
}

#[test]
fn truncate_prompt_tokens_keeps_the_prompts_last_tokens() {
    let s = Server::start(&[]);
    let run = |extra: Value| {
        let mut body = json!({"model": "tiny", "max_tokens": 4, "temperature": 0});
        for (k, v) in extra.as_object().expect("an object") {
            body[k] = v.clone();
        }
        let r = s.post("/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let long = run(json!({"prompt_token_ids": [5, 6, 7, 8, 9], "truncate_prompt_tokens": 2}));
    let short = run(json!({"prompt_token_ids": [8, 9]}));
    assert_eq!(long["usage"]["prompt_tokens"], json!(2), "{long}");
    assert_eq!(long["choices"][0]["text"], short["choices"][0]["text"], "{long} / {short}");
    // Shorter prompts stay whole; the chat route cuts its rendered prompt alike.
    let whole = run(json!({"prompt_token_ids": [8, 9], "truncate_prompt_tokens": 7}));
    assert_eq!(whole["choices"][0]["text"], short["choices"][0]["text"]);
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                      "truncate_prompt_tokens": 3});
    let r = s.post("/v1/chat/completions", &chat);
    assert_eq!((r.status, r.json()["usage"]["prompt_tokens"].clone()), (200, json!(3)), "{}", r.text());
    for bad in [0i64, -2, 1 << 40] {
        let body = json!({"model": "tiny", "prompt": "ab", "max_tokens": 2, "truncate_prompt_tokens": bad});
        let r = s.post("/v1/completions", &body);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], json!("truncate_prompt_tokens"), "{}", r.text());
    }
}
