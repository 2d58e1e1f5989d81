//! Chat templates as Hugging Face renders them: Jinja (minijinja, `trim_blocks` and
//! `lstrip_blocks` on, loop controls, Python string methods), HF's `tojson` (no HTML escaping,
//! Python's separators), `raise_exception` and `strftime_now`; the built-in templates and the
//! choice of one for a model live in `template/`.

pub mod budget;
pub mod builtin;
pub mod choice;
pub mod continue_final;

pub use budget::{DEFAULT_FUEL, RenderError};
pub use builtin::{BUILTINS, Builtin, builtin, builtin_names, family_builtin};
pub use choice::{Choice, Origin, choose};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, syntax::SyntaxConfig};
use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The work budget of one render (`None`: unbounded).
    fuel: Option<u64>,
}

/// What a template sees besides the messages.
pub struct TemplateInput {
    /// The conversation (order-preserving, as received).
    pub messages: Value,
    /// Tool definitions, if the request has any.
    pub tools: Option<Value>,
    /// Whether to open an assistant turn at the end.
    pub add_generation_prompt: bool,
    /// Extra variables (`chat_template_kwargs`), e.g. `enable_thinking`.
    pub extra: Vec<(String, Value)>,
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` and `eos_token` become template globals.
    pub fn new(source: &str, bos_token: Option<&str>, eos_token: Option<&str>) -> Result<ChatTemplate, Error> {
        let mut env = Environment::new();
        env.set_syntax(SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build()?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_global("bos_token", bos_token.unwrap_or_default());
        env.add_global("eos_token", eos_token.unwrap_or_default());
        env.add_template_owned("chat", source.to_string())?;
        env.set_fuel(Some(DEFAULT_FUEL));
        Ok(ChatTemplate { env, fuel: Some(DEFAULT_FUEL) })
    }

    /// Whether the template reads the variable `name` (one a request may set, such as
    /// `reasoning_effort`).
    pub fn reads(&self, name: &str) -> bool {
        self.env.get_template("chat").is_ok_and(|t| t.undeclared_variables(false).contains(name))
    }

    /// The same template with `fuel` as the work budget of each render (`None`: unbounded).
    pub fn with_fuel(mut self, fuel: Option<u64>) -> ChatTemplate {
        self.env.set_fuel(fuel);
        self.fuel = fuel;
        self
    }

    /// Renders the prompt text for a conversation, within the fuel budget.
    pub fn render(&self, input: TemplateInput) -> Result<String, RenderError> {
        self.render_capped(input, usize::MAX)
    }

    /// Renders the prompt text for a conversation, refused once it burns its fuel or its text
    /// passes `max_bytes`.
    pub fn render_capped(&self, input: TemplateInput, max_bytes: usize) -> Result<String, RenderError> {
        let tmpl = self.env.get_template("chat").map_err(RenderError::Template)?;
        let mut ctx: Vec<(String, Value)> = input.extra;
        ctx.push(("messages".into(), input.messages));
        ctx.push(("add_generation_prompt".into(), Value::from(input.add_generation_prompt)));
        if let Some(tools) = input.tools {
            ctx.push(("tools".into(), tools));
        }
        let mut out = budget::CappedWriter::new(max_bytes);
        tmpl.render_captured_to(Value::from_pairs(ctx), &mut out)
            .map_err(|e| budget::classify(e, self.fuel, max_bytes))?;
        String::from_utf8(out.buf).map_err(|e| {
            RenderError::Template(Error::new(ErrorKind::InvalidOperation, format!("the output is not UTF-8: {e}")))
        })
    }
}

/// HF's `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys)`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, &value, indent, sort_keys.unwrap_or(false), 0)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(out: &mut String, v: &Value, indent: Option<usize>, sort: bool, depth: usize) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if sort {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                out.push_str(if i > 0 { item_sep } else { "" });
                newline(out, depth + 1);
                let key = k.as_str().map_or_else(|| k.to_string(), str::to_string);
                out.push_str(&json_string(&key));
                out.push_str(": ");
                write_json(out, &v.get_item(k)?, indent, sort, depth + 1)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i > 0 { item_sep } else { "" });
                newline(out, depth + 1);
                write_json(out, item, indent, sort, depth + 1)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::String => out.push_str(&json_string(v.as_str().unwrap_or_default())),
        _ => {
            let s = serde_json::to_string(v).map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
            out.push_str(&s);
        }
    }
    Ok(())
}

/// A JSON string literal with Python's escapes (`ensure_ascii=False`: only `"`, `\` and controls).
fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Python's `strftime` over the current UTC time, for the common directives.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    strftime(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Formats seconds since the epoch (UTC).
fn strftime(format: &str, secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    let rem = secs % 86_400;
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{y}"),
            Some('y') => write!(out, "{:02}", y % 100),
            Some('m') => write!(out, "{m:02}"),
            Some('d') => write!(out, "{d:02}"),
            Some('e') => write!(out, "{d:2}"),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{hh:02}"),
            Some('I') => write!(out, "{:02}", (hh + 11) % 12 + 1),
            Some('p') => write!(out, "{}", if hh < 12 { "AM" } else { "PM" }),
            Some('M') => write!(out, "{mm:02}"),
            Some('S') => write!(out, "{ss:02}"),
            Some('B') => write!(out, "{month}"),
            Some('b') | Some('h') => write!(out, "{}", &month[..3]),
            Some('A') => write!(out, "{}", DAYS[weekday]),
            Some('a') => write!(out, "{}", &DAYS[weekday][..3]),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}\
        {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    fn messages(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let t = ChatTemplate::new(CHATML, Some("<s>"), None).unwrap();
        let input = TemplateInput {
            messages: messages(r#"[{"role":"user","content":"hi"}]"#),
            tools: None,
            add_generation_prompt: true,
            extra: vec![],
        };
        assert_eq!(t.render(input).unwrap(), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn tojson_matches_python_and_keeps_order() {
        let src = "{{ tools | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ 'a<b&c' | tojson }}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        let tools = messages(r#"[{"z": 1, "a": [1.0, "x", null], "é": true}]"#);
        let input = TemplateInput {
            messages: Value::from(()),
            tools: Some(tools),
            add_generation_prompt: false,
            extra: vec![],
        };
        let want = "[{\"z\": 1, \"a\": [1.0, \"x\", null], \"é\": true}]|{\n  \"z\": 1,\n  \"a\": [\n    1.0,\n    \"x\",\n    null\n  ],\n  \"é\": true\n}|\"a<b&c\"";
        assert_eq!(t.render(input).unwrap(), want);
    }

    #[test]
    fn helpers_raise_and_python_methods_work() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", None, None).unwrap();
        let input =
            || TemplateInput { messages: Value::from(()), tools: None, add_generation_prompt: false, extra: vec![] };
        assert!(t.render(input()).unwrap_err().to_string().contains("no system role"));
        let t = ChatTemplate::new("{{ ' Hi '.strip().upper() }}{% for i in [1,2,3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}", None, None).unwrap();
        assert_eq!(t.render(input()).unwrap(), "HI1");
        let t = ChatTemplate::new("{{ strftime_now('%Y') | length }}", None, None).unwrap();
        assert_eq!(t.render(input()).unwrap(), "4");
    }

    #[test]
    fn strftime_formats_known_dates() {
        assert_eq!(strftime("%d %b %Y %H:%M:%S %A %j", 0), "01 Jan 1970 00:00:00 Thursday 001");
        // 2024-02-29 13:05:09 UTC, a Thursday.
        assert_eq!(strftime("%Y-%m-%d %I%p %a %B %%", 1_709_211_909), "2024-02-29 01PM Thu February %");
    }
}
