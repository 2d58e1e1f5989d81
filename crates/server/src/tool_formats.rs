//! The tool-call formats the families' chat templates teach, parsed back into calls:
//! Hermes / Qwen3 `<tool_call>{json}</tool_call>`; GLM-4.x `<tool_call>name<arg_key>k</arg_key>
//! <arg_value>v</arg_value>...</tool_call>`; DeepSeek V3 `<｜tool▁call▁begin｜>function<｜tool▁sep｜>
//! name` and a fenced JSON block, and V3.1's `name<｜tool▁sep｜>{json}`; Gemma 4
//! `<|tool_call>call:name{k:<|"|>v<|"|>}<tool_call|>` and FunctionGemma's
//! `<start_function_call>call:name{k:<escape>v<escape>}<end_function_call>`. Each parser gives
//! the calls it read and the text left around them; a block that does not parse stays text.

use crate::tools::Call;
use serde_json::{Map, Value};

/// DeepSeek V3's markers.
const DS_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DS_CALLS_END: &str = "<｜tool▁calls▁end｜>";
const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";

/// The calls in `text` in whichever known format it uses, and the text left (`None` if the
/// text holds no block of any format). `string_arg(name, key)` says whether tool `name`'s
/// parameter `key` is declared a string (GLM's values carry no quotes).
pub(crate) fn parse_blocks(text: &str, string_arg: &dyn Fn(&str, &str) -> bool) -> Option<(String, Vec<Call>)> {
    if text.contains("<tool_call>") {
        return Some(blocks(text, "<tool_call>", "</tool_call>", &|b| hermes(b).or_else(|| glm(b, string_arg))));
    }
    if text.contains(DS_CALL_BEGIN) {
        let (left, calls) = blocks(text, DS_CALL_BEGIN, DS_CALL_END, &deepseek);
        return Some((left.replace(DS_CALLS_BEGIN, "").replace(DS_CALLS_END, ""), calls));
    }
    if text.contains("<|tool_call>") {
        return Some(blocks(text, "<|tool_call>", "<tool_call|>", &|b| gemma(b, "<|\"|>")));
    }
    if text.contains("<start_function_call>") {
        return Some(blocks(text, "<start_function_call>", "<end_function_call>", &|b| gemma(b, "<escape>")));
    }
    None
}

/// Every `open ... close` block of `text` read by `body`; an unclosed last block runs to the
/// end. Returns the text outside the parsed blocks and the calls in order.
fn blocks(text: &str, open: &str, close: &str, body: &dyn Fn(&str) -> Option<Call>) -> (String, Vec<Call>) {
    let (mut rest, mut calls, mut left) = (text, Vec::new(), String::new());
    while let Some(start) = rest.find(open) {
        left.push_str(&rest[..start]);
        let inner_and_after = &rest[start + open.len()..];
        let (inner, after) = match inner_and_after.find(close) {
            Some(end) => (&inner_and_after[..end], &inner_and_after[end + close.len()..]),
            None => (inner_and_after, ""),
        };
        match body(inner) {
            Some(c) => calls.push(c),
            None => left.push_str(&rest[start..rest.len() - after.len()]),
        }
        rest = after;
    }
    left.push_str(rest);
    (left, calls)
}

/// A JSON object `{"name", "arguments" | "parameters"}` as a call.
pub(crate) fn json_call(v: &Value) -> Option<Call> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").or_else(|| v.get("parameters"))?;
    let arguments = match args {
        Value::String(s) if serde_json::from_str::<Value>(s).is_ok_and(|v| v.is_object()) => s.clone(),
        Value::Object(_) => args.to_string(),
        _ => return None,
    };
    Some(Call { name, arguments })
}

/// Hermes / Qwen3: the block is one JSON call.
fn hermes(body: &str) -> Option<Call> {
    json_call(&serde_json::from_str::<Value>(body.trim()).ok()?)
}

/// GLM-4.x: the name on the first line, then `<arg_key>k</arg_key><arg_value>v</arg_value>`
/// pairs; a value is JSON unless its parameter is declared a string (or it is not JSON).
fn glm(body: &str, string_arg: &dyn Fn(&str, &str) -> bool) -> Option<Call> {
    let body = body.trim();
    let name_end = body.find("<arg_key>").unwrap_or(body.len());
    let name = body[..name_end].trim();
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains('<') {
        return None;
    }
    let mut args = Map::new();
    let mut rest = &body[name_end..];
    while !rest.trim().is_empty() {
        let r = rest.trim_start().strip_prefix("<arg_key>")?;
        let (key, r) = r.split_once("</arg_key>")?;
        let r = r.trim_start().strip_prefix("<arg_value>")?;
        let (value, r) = r.split_once("</arg_value>")?;
        let key = key.trim();
        let parsed = if string_arg(name, key) { None } else { serde_json::from_str::<Value>(value).ok() };
        args.insert(key.to_string(), parsed.unwrap_or_else(|| Value::String(value.to_string())));
        rest = r;
    }
    Some(Call { name: name.to_string(), arguments: Value::Object(args).to_string() })
}

/// DeepSeek V3 (`function<｜tool▁sep｜>name` then a fenced JSON block) and V3.1
/// (`name<｜tool▁sep｜>{json}`).
fn deepseek(body: &str) -> Option<Call> {
    let (head, tail) = body.split_once(DS_SEP)?;
    let (name, args) = if head.trim() == "function" {
        let (name, rest) = tail.split_once('\n').unwrap_or((tail, ""));
        let rest = rest.trim();
        let rest = rest.strip_prefix("```json").or_else(|| rest.strip_prefix("```")).unwrap_or(rest);
        (name.trim(), rest.strip_suffix("```").unwrap_or(rest).trim())
    } else {
        (head.trim(), tail.trim())
    };
    let args: Value = serde_json::from_str(args).ok()?;
    (!name.is_empty() && args.is_object()).then(|| Call { name: name.to_string(), arguments: args.to_string() })
}

/// Gemma: `call:name{key:value,...}` where strings sit between `quote` markers, and numbers,
/// booleans, lists `[...]` and objects `{...}` are written bare.
fn gemma(body: &str, quote: &str) -> Option<Call> {
    let r = body.trim().strip_prefix("call:")?;
    let brace = r.find('{')?;
    let name = r[..brace].trim();
    let mut p = Gemma { s: &r[brace..], quote };
    let args = p.value()?;
    (!name.is_empty() && args.is_object() && p.s.trim().is_empty())
        .then(|| Call { name: name.to_string(), arguments: args.to_string() })
}

/// A cursor over Gemma's argument syntax.
struct Gemma<'a> {
    s: &'a str,
    quote: &'a str,
}

impl Gemma<'_> {
    fn eat(&mut self, c: char) -> bool {
        self.s = self.s.trim_start();
        match self.s.strip_prefix(c) {
            Some(r) => {
                self.s = r;
                true
            }
            None => false,
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.s = self.s.trim_start();
        if let Some(r) = self.s.strip_prefix(self.quote) {
            let (v, r) = r.split_once(self.quote)?;
            self.s = r;
            return Some(Value::String(v.to_string()));
        }
        if self.eat('{') {
            let mut m = Map::new();
            while !self.eat('}') {
                if !m.is_empty() && !self.eat(',') {
                    return None;
                }
                let key = self.key()?;
                if !self.eat(':') {
                    return None;
                }
                m.insert(key, self.value()?);
            }
            return Some(Value::Object(m));
        }
        if self.eat('[') {
            let mut l = Vec::new();
            while !self.eat(']') {
                if !l.is_empty() && !self.eat(',') {
                    return None;
                }
                l.push(self.value()?);
            }
            return Some(Value::Array(l));
        }
        let end = self.s.find([',', '}', ']']).unwrap_or(self.s.len());
        let word = self.s[..end].trim();
        self.s = &self.s[end..];
        serde_json::from_str::<Value>(word).ok().filter(|v| !v.is_object() && !v.is_array())
    }

    fn key(&mut self) -> Option<String> {
        self.s = self.s.trim_start();
        if let Some(r) = self.s.strip_prefix(self.quote) {
            let (k, r) = r.split_once(self.quote)?;
            self.s = r;
            return Some(k.to_string());
        }
        let end = self.s.find(':')?;
        let key = self.s[..end].trim();
        self.s = &self.s[end..];
        (!key.is_empty()).then(|| key.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> Call {
        Call { name: name.into(), arguments: arguments.into() }
    }

    fn city_is_string(name: &str, key: &str) -> bool {
        name == "get_weather" && key == "city"
    }

    #[test]
    fn glm_pairs_are_typed_by_the_schema() {
        let text = "I will look.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>42</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"unit\": \"c\"}</arg_value>\n</tool_call><tool_call>now\n</tool_call>";
        let (left, calls) = parse_blocks(text, &city_is_string).unwrap();
        assert_eq!(left, "I will look.");
        assert_eq!(calls, [call("get_weather", r#"{"city":"42","days":3,"opts":{"unit":"c"}}"#), call("now", "{}")]);
        let (left, calls) = parse_blocks("<tool_call>get_weather <arg_key>x</tool_call>", &city_is_string).unwrap();
        assert!(calls.is_empty());
        assert_eq!(left, "<tool_call>get_weather <arg_key>x</tool_call>");
    }

    #[test]
    fn deepseek_v3_and_v31_blocks_parse() {
        let v3 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let (left, calls) = parse_blocks(v3, &city_is_string).unwrap();
        assert_eq!(left.trim(), "");
        assert_eq!(calls, [call("get_weather", r#"{"city":"Paris"}"#), call("now", "{}")]);
        let v31 = "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":\"Rome\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let (left, calls) = parse_blocks(v31, &city_is_string).unwrap();
        assert_eq!(left, "Sure.");
        assert_eq!(calls, [call("get_weather", r#"{"city":"Rome"}"#)]);
    }

    #[test]
    fn gemma_calls_parse_with_either_quote() {
        let g4 = "<|tool_call>call:get_weather{city:<|\"|>Paris, France<|\"|>,days:3,hourly:true,tags:[<|\"|>a<|\"|>,2],opt:{unit:<|\"|>c<|\"|>}}<tool_call|>";
        let (left, calls) = parse_blocks(g4, &city_is_string).unwrap();
        assert_eq!(left, "");
        assert_eq!(
            calls,
            [call(
                "get_weather",
                r#"{"city":"Paris, France","days":3,"hourly":true,"tags":["a",2],"opt":{"unit":"c"}}"#
            )]
        );
        let fg = "<start_function_call>call:now{tz:<escape>UTC<escape>}<end_function_call>";
        assert_eq!(parse_blocks(fg, &city_is_string).unwrap().1, [call("now", r#"{"tz":"UTC"}"#)]);
        let broken = "<|tool_call>call:now{tz:<|\"|>UTC}<tool_call|>";
        assert_eq!(parse_blocks(broken, &city_is_string).unwrap(), (broken.to_string(), Vec::new()));
    }

    #[test]
    fn text_without_blocks_is_not_read() {
        assert!(parse_blocks("plain words {\"name\": 1}", &city_is_string).is_none());
    }
}
