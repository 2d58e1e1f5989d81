//! Hostile constraints against the compile path the server uses: reference chains past the cap
//! are refused (and ones the cap is lifted for compile on the worker's stack instead of
//! overflowing it), cyclic references with no base case are refused, recursion with one works,
//! and the cache stays within its byte budget.

use serde_json::{Value, json};
use tf_grammar::{GrammarError, Grammars, Limits, Spec};

const EOS: u32 = 256;

fn grammars(limits: Limits) -> Grammars {
    let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    bytes.push(b"\xff<eos>".to_vec());
    Grammars::new(&bytes, EOS, limits).unwrap()
}

/// A schema of `n` definitions, each an object whose one property refers to the next.
fn ref_chain(n: usize) -> Spec {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = json!({"type": "object", "properties": {"next": {"$ref": format!("#/definitions/d{}", i + 1)}}});
        defs.insert(format!("d{i}"), if i + 1 < n { next } else { json!({"type": "string"}) });
    }
    Spec::JsonSchema(json!({"$ref": "#/definitions/d0", "definitions": defs}))
}

/// A Lark grammar of `n` rules, each naming the next.
fn rule_chain(n: usize) -> Spec {
    let mut g = String::from("start: r0\n");
    for i in 0..n {
        g.push_str(&format!("r{i}: r{}\n", i + 1));
    }
    Spec::Lark(g + &format!("r{n}: \"x\"\n"))
}

/// An output the constraint allows, taking the lowest id each step (the highest with `high`).
fn first_output(g: &Grammars, spec: &Spec, high: bool) -> String {
    let c = g.compile(spec).unwrap();
    let mut m = g.start(&c);
    let mut out = Vec::new();
    for _ in 0..200 {
        let words = m.mask().unwrap();
        let mut ids = (0..words.len() as u32 * 32).filter(|&i| words[i as usize / 32] >> (i % 32) & 1 == 1);
        let t = if high { ids.next_back() } else { ids.next() }.unwrap();
        if t == EOS {
            break;
        }
        assert!(m.accept(t));
        out.push(t as u8);
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn reference_chains_past_the_cap_are_refused() {
    let g = grammars(Limits::default());
    assert!(ref_chain(250).size() < Limits::default().max_bytes, "inside the byte cap");
    let e = g.compile(&ref_chain(250)).err();
    assert!(matches!(&e, Some(GrammarError::TooLarge(m)) if m.contains("$ref chain")), "{e:?}");
    let e = g.compile(&rule_chain(1000)).err();
    assert!(matches!(&e, Some(GrammarError::TooLarge(m)) if m.contains("rule")), "{e:?}");
    g.compile(&ref_chain(100)).unwrap();
    g.compile(&rule_chain(100)).unwrap();
}

#[test]
fn chains_the_cap_lets_through_compile_without_overflowing_the_stack() {
    // 250 and 1,000 overflowed the compiler's 2 MiB stack and aborted the process.
    let g = grammars(Limits { max_ref_depth: usize::MAX, ..Limits::default() });
    g.compile(&ref_chain(250)).unwrap();
    g.compile(&rule_chain(1000)).unwrap();
}

#[test]
fn cyclic_references_with_no_base_case_are_refused() {
    let g = grammars(Limits::default());
    let cases = [
        json!({"$ref": "#"}),
        json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}),
        json!({"$ref": "#/definitions/a", "definitions": {"a": {"allOf": [{"$ref": "#/definitions/a"}]}}}),
    ];
    for schema in cases {
        let e = g.compile(&Spec::JsonSchema(schema.clone())).err();
        assert!(matches!(&e, Some(GrammarError::Invalid(m)) if m.contains("cyclic $ref")), "{schema}: {e:?}");
    }
    let needs_itself = json!({"anyOf": [{"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}]});
    let e = g.compile(&Spec::JsonSchema(needs_itself)).err();
    assert!(matches!(&e, Some(GrammarError::Invalid(m)) if m.contains("no base case")), "{e:?}");
    // A grammar that matches nothing at all is refused by what it compiles to.
    let e = g.compile(&Spec::Lark("start: start".into())).err();
    assert!(matches!(&e, Some(GrammarError::Invalid(m)) if m.contains("matches no output")), "{e:?}");
}

#[test]
fn recursion_with_a_base_case_still_compiles() {
    let g = grammars(Limits::default());
    let tree = json!({"type": "object", "properties": {"v": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}}}, "required": ["v"], "additionalProperties": false});
    let text = first_output(&g, &Spec::JsonSchema(tree), false);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(v["v"].is_number() && v["children"].is_array(), "{text}");
    let lark = Spec::Lark("start: item\nitem: \"(\" item \")\" | \"x\"\n".into());
    let c = g.compile(&lark).unwrap();
    let mut m = g.start(&c);
    assert!(m.accept(b'(' as u32) && m.accept(b'(' as u32) && m.accept(b'x' as u32));
    assert!(m.accept(b')' as u32) && m.accept(b')' as u32));
    let words = m.mask().unwrap();
    assert_eq!(words.iter().map(|w| w.count_ones()).sum::<u32>(), 1, "only the end is left");
    assert_eq!(words[EOS as usize / 32] >> (EOS % 32) & 1, 1);
}

#[test]
fn the_cache_stays_within_its_byte_budget() {
    let budget = 2 << 20;
    let g = grammars(Limits { cache_bytes: budget, ..Limits::default() });
    for i in 0..12 {
        let props: serde_json::Map<String, Value> =
            (0..100).map(|p| (format!("p{i}_{p}"), json!({"type": "string", "maxLength": p + 1}))).collect();
        g.compile(&Spec::JsonSchema(json!({"type": "object", "properties": props}))).unwrap();
        assert!(g.cached_bytes() <= budget, "{} bytes cached", g.cached_bytes());
    }
    assert!((1..12).contains(&g.cached()), "{} kept", g.cached());
}
