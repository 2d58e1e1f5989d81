//! Chat prompts to ids with the users' text kept literal (SECURITY-CASES 8): a message content
//! that spells a special token is swapped for a sentinel before the template renders, and after
//! rendering the template's own text is tokenized as usual (its control tokens parsed) while each
//! swapped content is tokenized as plain text. Contents without special spellings are left in
//! place, so ordinary chats tokenize exactly as `apply_chat_template` + `encode` would.

use minijinja::Value as JValue;
use serde::Deserialize;
use tf_core::TokenIds;
use tf_tokenize::{TokenizeError, Tokenizer};

/// Brackets a sentinel's index (a private-use character no template emits).
const MARK: char = '\u{10FFFD}';

/// `messages` with each content that spells a special token (or the sentinel mark) replaced by a
/// sentinel; the replaced contents are appended to `literals` in sentinel order.
pub fn protect(messages: JValue, tok: &Tokenizer, literals: &mut Vec<String>) -> JValue {
    let Ok(iter) = messages.try_iter() else { return messages };
    iter.map(|m| {
        let content = m.get_attr("content").ok().and_then(|c| c.as_str().map(str::to_string));
        let Some(text) = content.filter(|t| tok.spells_special(t) || t.contains(MARK)) else { return m };
        let sentinel = format!("{MARK}{}{MARK}", literals.len());
        literals.push(text);
        let keys: Vec<JValue> = m.try_iter().into_iter().flatten().collect();
        JValue::from_pairs(keys.into_iter().map(|k| {
            let v = match k.as_str() == Some("content") {
                true => JValue::from(sentinel.clone()),
                false => m.get_item(&k).unwrap_or_default(),
            };
            (k, v)
        }))
    })
    .collect()
}

/// Ids of a rendered chat: template text with its control tokens, `literals` as plain text where
/// their sentinels stand; `add_special_tokens` applies to the first piece (e.g. a BOS).
pub fn encode(tok: &Tokenizer, rendered: &str, literals: &[String], add: bool) -> Result<TokenIds, TokenizeError> {
    if literals.is_empty() {
        return tok.encode(rendered, add);
    }
    let mut ids = TokenIds::new();
    let mut first = add;
    let mut piece = |text: &str, literal: bool, ids: &mut TokenIds| -> Result<(), TokenizeError> {
        if text.is_empty() && !first {
            return Ok(());
        }
        let part = if literal { tok.encode_literal(text, first)? } else { tok.encode(text, first)? };
        first = false;
        ids.extend_from(&part);
        Ok(())
    };
    let mut rest = rendered;
    while let Some(start) = rest.find(MARK) {
        let after = &rest[start + MARK.len_utf8()..];
        let parsed = after.find(MARK).and_then(|end| Some((after[..end].parse::<usize>().ok()?, end)));
        match parsed.and_then(|(i, end)| literals.get(i).map(|l| (l, end))) {
            Some((literal, end)) => {
                piece(&rest[..start], false, &mut ids)?;
                piece(literal, true, &mut ids)?;
                rest = &after[end + MARK.len_utf8()..];
            }
            // A mark that is not one of ours: template text, then the mark itself as text.
            None => {
                let cut = start + MARK.len_utf8();
                piece(&rest[..start], false, &mut ids)?;
                piece(&rest[start..cut], true, &mut ids)?;
                rest = &rest[cut..];
            }
        }
    }
    piece(rest, false, &mut ids)?;
    Ok(ids)
}

/// The ids of a plain conversation (`[{"role", "content"}]`, contents text) as a chat request
/// without tools or kwargs gets them: rendered with an assistant turn opened, users' text kept
/// literal, no special tokens added (for clients in the same process, such as `tensorfold run`).
pub fn conversation_ids(
    template: &crate::ChatTemplate,
    tok: &Tokenizer,
    messages: &serde_json::Value,
) -> Result<TokenIds, String> {
    let mut literals = Vec::new();
    let messages = JValue::deserialize(messages).map_err(|e| format!("messages: {e}"))?;
    let messages = protect(messages, tok, &mut literals);
    let input =
        crate::template::TemplateInput { messages, tools: None, add_generation_prompt: true, extra: Vec::new() };
    let text = template.render(input).map_err(|e| format!("chat template: {e}"))?;
    encode(tok, &text, &literals, false).map_err(|e| e.to_string())
}
