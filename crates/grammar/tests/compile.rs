//! Compiling and walking constraints over a vocabulary of single bytes plus an end token.

use serde_json::{Value, json};
use std::time::Duration;
use tf_grammar::{GrammarError, Grammars, Limits, Spec};

const EOS: u32 = 256;

fn grammars(limits: Limits) -> Grammars {
    let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    bytes.push(b"\xff<eos>".to_vec());
    Grammars::new(&bytes, EOS, limits).unwrap()
}

fn allowed(words: &[u32]) -> Vec<u32> {
    (0..words.len() as u32 * 32).filter(|&i| words[i as usize / 32] >> (i % 32) & 1 == 1).collect()
}

/// Follows the constraint taking, at each step, the allowed id `pick` chooses, until the end.
fn walk(g: &Grammars, spec: &Spec, mut pick: impl FnMut(&[u32]) -> u32) -> String {
    let c = g.compile(spec).unwrap();
    let mut m = g.start(&c);
    let mut out = Vec::new();
    for _ in 0..400 {
        let ids = allowed(&m.mask().unwrap());
        assert!(!ids.is_empty(), "some id is always allowed");
        let t = pick(&ids);
        if t == EOS {
            break;
        }
        assert!(m.accept(t));
        out.push(t as u8);
        if m.is_stopped() {
            break;
        }
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn every_walk_of_a_schema_is_json_that_matches_it() {
    let g = grammars(Limits::default());
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "n": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["name", "tags", "n"], "additionalProperties": false});
    for seed in 0..6u64 {
        let mut x = seed;
        let text = walk(&g, &Spec::JsonSchema(schema.clone()), |ids| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Prefer ending soon so walks finish: the last ids (closing marks, EOS) half the time.
            ids[((x >> 33) as usize) % ids.len()]
        });
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let n = v["n"].as_i64().unwrap();
        assert!((1..=9).contains(&n), "{text}");
        assert!(v["name"].as_str().unwrap().chars().count() <= 5);
        assert!(v["tags"].as_array().unwrap().iter().all(|t| t == "a" || t == "b"));
    }
}

#[test]
fn a_choice_allows_only_its_strings_and_a_refused_token_changes_nothing() {
    let g = grammars(Limits::default());
    let spec = Spec::Choice(vec!["yes".into(), "no".into()]);
    let c = g.compile(&spec).unwrap();
    let mut m = g.start(&c);
    assert_eq!(allowed(&m.mask().unwrap()), [b'n' as u32, b'y' as u32]);
    assert!(!m.accept(b'x' as u32));
    assert!(m.accept(b'n' as u32));
    assert_eq!(allowed(&m.mask().unwrap()), [b'o' as u32]);
    assert!(m.rollback(1));
    assert_eq!(allowed(&m.mask().unwrap()), [b'n' as u32, b'y' as u32]);
    assert!(m.accept(b'y' as u32) && m.accept(b'e' as u32) && m.accept(b's' as u32));
    assert_eq!(allowed(&m.mask().unwrap()), [EOS]);
}

#[test]
fn bad_and_oversized_constraints_are_refused() {
    let g = grammars(Limits { max_bytes: 200, max_depth: 4, ..Limits::default() });
    assert!(matches!(g.compile(&Spec::Regex("(a".into())), Err(GrammarError::Invalid(_))));
    assert!(matches!(g.compile(&Spec::Lark("start: nope".into())), Err(GrammarError::Invalid(_))));
    assert!(matches!(g.compile(&Spec::JsonSchema(json!({"type": "bogus"}))), Err(GrammarError::Invalid(_))));
    assert!(matches!(g.compile(&Spec::Regex("a".repeat(201))), Err(GrammarError::TooLarge(_))));
    let deep = json!({"a": {"b": {"c": {"d": {"e": 1}}}}});
    assert!(matches!(g.compile(&Spec::JsonSchema(deep)), Err(GrammarError::TooLarge(_))));
    assert!(matches!(g.compile(&Spec::Choice(Vec::new())), Err(GrammarError::Invalid(_))));
}

#[test]
fn compiles_are_cached_by_content_within_the_cap() {
    let g = grammars(Limits { cache_entries: 3, ..Limits::default() });
    for i in 0..10 {
        g.compile(&Spec::Regex(format!("a{{{i}}}"))).unwrap();
    }
    assert_eq!(g.cached(), 3);
}

#[test]
fn a_compile_past_the_time_cap_is_refused() {
    let g = grammars(Limits { timeout: Duration::from_nanos(1), ..Limits::default() });
    let schema = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-z]{3,40}x"}}});
    assert!(matches!(g.compile(&Spec::JsonSchema(schema)), Err(GrammarError::Timeout(_))));
}

#[test]
fn schema_output_is_compact_json() {
    // The lowest allowed id is always taken: whitespace (ids 9, 10, 13, 32) would win if allowed.
    let g = grammars(Limits::default());
    let schema = json!({"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "boolean"}},
        "required": ["a", "b"], "additionalProperties": false});
    let text = walk(&g, &Spec::JsonSchema(schema), |ids| ids[0]);
    assert_eq!(text, r#"{"a":1,"b":false}"#);
}
