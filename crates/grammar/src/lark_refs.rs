//! A Lark grammar's reference structure, measured without recursion: the longest chain of rule
//! and token names each referring to the next (what the compiler's recursion depth grows with).
//! Strings, regexes, comments and `%json {...}` / `%llguidance {...}` bodies are skipped.

use std::collections::HashMap;

/// The longest chain of definitions each referring to the next in `src`, starting from `start`
/// and then from every other definition (a name reached again on the same chain ends it);
/// `Err(at_least)` once it passes `cap`.
pub(crate) fn rule_depth(src: &str, cap: usize) -> Result<usize, usize> {
    let defs = definitions(src);
    let index: HashMap<&str, usize> = defs.iter().enumerate().map(|(i, (n, _))| (*n, i)).collect();
    let edges: Vec<Vec<usize>> =
        defs.iter().map(|(_, refs)| refs.iter().filter_map(|r| index.get(r).copied()).collect()).collect();
    let mut done: Vec<Option<usize>> = vec![None; defs.len()];
    let mut on_path = vec![false; defs.len()];
    let starts = index.get("start").copied().into_iter().chain(0..defs.len());
    let mut most = 0;
    for s in starts {
        if done[s].is_some() {
            continue;
        }
        // (definition, next edge to walk, longest chain below it so far)
        let mut path: Vec<(usize, usize, usize)> = vec![(s, 0, 0)];
        on_path[s] = true;
        while let Some(top) = path.last_mut() {
            let d = top.0;
            if let Some(&n) = edges[d].get(top.1) {
                top.1 += 1;
                if on_path[n] {
                    continue;
                }
                if let Some(below) = done[n] {
                    top.2 = top.2.max(below + 1);
                    continue;
                }
                if path.len() > cap {
                    return Err(path.len());
                }
                on_path[n] = true;
                path.push((n, 0, 0));
                continue;
            }
            let below = top.2;
            path.pop();
            on_path[d] = false;
            done[d] = Some(below);
            if let Some(parent) = path.last_mut() {
                parent.2 = parent.2.max(below + 1);
            }
        }
        most = most.max(done[s].unwrap_or(0));
        if most > cap {
            return Err(most);
        }
    }
    Ok(most)
}

/// Each definition's name and the names its body mentions, in order.
fn definitions(src: &str) -> Vec<(&str, Vec<&str>)> {
    let b = src.as_bytes();
    let mut defs: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut line_start = true;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'?' | b'!' if line_start => {
                i += 1;
                continue;
            }
            b'#' => i = skip_line(b, i),
            b'/' if b.get(i + 1) == Some(&b'/') => i = skip_line(b, i),
            b'"' | b'/' => i = skip_quoted(b, i, c),
            b'%' => {
                let word_end = skip_word(b, i + 1);
                let name = &src[i + 1..word_end];
                if line_start {
                    // A directive (`%ignore`, `%import`, `%llguidance`) ends the definition.
                    defs.push(("", Vec::new()));
                }
                i = word_end;
                if matches!(name, "json" | "llguidance" | "regex") {
                    i = skip_braces(b, i);
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = skip_word(b, i);
                let name = &src[i..end];
                if line_start && defines(b, end) {
                    defs.push((name, Vec::new()));
                } else if let Some((_, refs)) = defs.last_mut() {
                    refs.push(name);
                }
                i = end;
            }
            _ => i += 1,
        }
        line_start = false;
    }
    defs.retain(|(n, _)| !n.is_empty());
    defs
}

/// Whether what follows a name at `i` makes it a definition: an optional `.priority`,
/// `[attributes]` and `{parameters}`, then `:`.
fn defines(b: &[u8], mut i: usize) -> bool {
    let skip_ws = |b: &[u8], mut i: usize| {
        while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
            i += 1;
        }
        i
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'-') {
            i += 1;
        }
    }
    i = skip_ws(b, i);
    for (open, close) in [(b'[', b']'), (b'{', b'}')] {
        if b.get(i) == Some(&open) {
            while i < b.len() && b[i] != close && b[i] != b'\n' {
                i = if b[i] == b'"' { skip_quoted(b, i, b'"') } else { i + 1 };
            }
            i = skip_ws(b, i + 1);
        }
    }
    b.get(i) == Some(&b':')
}

/// Past the name starting at `i`.
fn skip_word(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
        i += 1;
    }
    i
}

/// To the end of the line (the newline itself is left).
fn skip_line(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

/// Past a string or regex opened by `quote` at `i` (backslash escapes; an unclosed one ends at
/// the end of the line).
fn skip_quoted(b: &[u8], mut i: usize, quote: u8) -> usize {
    i += 1;
    while i < b.len() && b[i] != quote && b[i] != b'\n' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    i + 1
}

/// Past a `{...}` body (JSON: strings may hold braces) starting after spaces at `i`; `i` when
/// none follows.
fn skip_braces(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while b.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
        j += 1;
    }
    if b.get(j) != Some(&b'{') {
        return i;
    }
    let mut depth = 0usize;
    while j < b.len() {
        match b[j] {
            b'"' => {
                j += 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `start` naming a chain of `n` rules, the last a string.
    fn chain(n: usize) -> String {
        let mut g = String::from("start: r0\n");
        for i in 0..n {
            g.push_str(&format!("r{i}: r{}\n", i + 1));
        }
        g + &format!("r{n}: \"x\"\n")
    }

    #[test]
    fn rule_chains_are_measured_from_start() {
        assert_eq!(rule_depth("start: \"x\"", 10), Ok(0));
        assert_eq!(rule_depth(&chain(5), 10), Ok(6));
        assert_eq!(rule_depth(&chain(20), 10), Err(11));
        let g = "?start: a | b\n!a.2: \"a\" b // b\nb[stop=\"\"]: /x\\/y/ # a: c\n  | A\nA: \"c\"\n";
        assert_eq!(rule_depth(g, 10), Ok(3), "start -> a -> b -> A");
    }

    #[test]
    fn strings_regexes_comments_and_json_bodies_name_nothing() {
        let g =
            "start: \"a b: c\" /d e/ x // f\n# g: h\nx: %json {\"properties\": {\"y\": {\"a\": \"}\"}}} z\nz: \"q\"\n";
        assert_eq!(definitions(g), vec![("start", vec!["x"]), ("x", vec!["z"]), ("z", vec![])]);
    }

    #[test]
    fn a_recursive_rule_is_not_endless() {
        assert_eq!(rule_depth("start: item*\nitem: \"(\" start \")\" | \"x\"\n", 10), Ok(1));
    }
}
