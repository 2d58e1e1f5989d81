//! The chat template `serve` renders chats with (and `/tokenize` with messages): chosen by
//! `tf_server::template::choose` (`--chat-template`, else the checkpoint's own, else the
//! family's usual built-in), compiled, and a built-in's end-of-turn token, checked against the
//! vocabulary, added to the ids that end generation (as the families' generation configs do).

use crate::exit::{Failure, refused};
use tf_backend::Backend;
use tf_models::Model;
use tf_server::template::{self, Origin};
use tf_server::{ChatTemplate, ModelInfo};

/// The template to serve with and what to tell the operator at startup.
pub struct Served {
    /// The compiled template (`None`: chat requests are refused with 400).
    pub template: Option<ChatTemplate>,
    /// One line saying which template is used and what ends a turn.
    pub note: String,
    /// Warnings for stderr (a family fallback, a missing end-of-turn token, a broken template).
    pub warnings: Vec<String>,
}

/// Chooses and compiles the template for `model` (`switch`: the `--chat-template` value); a
/// built-in's end-of-turn id joins `model.eos_ids` and `info.eos_ids`, and `info.chat_template`
/// becomes the chosen source. An unknown name, an unreadable file or a switch's template that
/// does not compile is refused (exit 2).
pub fn serve_template<B: Backend>(
    switch: Option<&str>,
    model: &mut Model<B>,
    info: &mut ModelInfo,
) -> Result<Served, Failure> {
    let mut warnings = Vec::new();
    let Some(tok) = model.tokenizer.as_ref() else {
        if switch.is_some() {
            return Err(refused("--chat-template: the model has no tokenizer, so it cannot chat"));
        }
        return Ok(Served { template: None, note: "chat: off (the model has no tokenizer)".into(), warnings });
    };
    let architecture = model.decoder.spec.architecture.clone();
    let has_token = |text: &str| tok.token_to_id(text).is_some();
    let Some(choice) = template::choose(switch, tok.chat_template(), &architecture, &has_token).map_err(refused)?
    else {
        warnings.push(format!("{architecture} has no usual chat template; chat requests will be refused"));
        return Ok(Served { template: None, note: "chat: off (no chat template)".into(), warnings });
    };
    warnings.extend(choice.warning(&architecture));
    let mut note = format!("chat template: {}", choice.describe());
    if let Some(text) = choice.end_of_turn {
        match tok.token_to_id(text).and_then(|id| model.vocab.check_one(i64::from(id)).ok()) {
            Some(id) => {
                for ids in [&mut model.eos_ids, &mut info.eos_ids] {
                    ids.push(id);
                    ids.sort_unstable();
                    ids.dedup();
                }
                note.push_str(&format!("; a turn ends at {text} (id {id})"));
            }
            None => warnings.push(format!(
                "the vocabulary has no {text} token: a chat answer ends only at the model's EOS or max_tokens"
            )),
        }
    }
    let compiled = ChatTemplate::new(&choice.source, info.bos_token.as_deref(), info.eos_token.as_deref());
    info.chat_template = Some(choice.source.clone());
    match compiled {
        Ok(t) => Ok(Served { template: Some(t), note, warnings }),
        Err(e) if matches!(choice.origin, Origin::SwitchFile(_) | Origin::SwitchBuiltin(_)) => {
            Err(refused(format!("--chat-template {}: the template does not compile: {e}", switch.unwrap_or_default())))
        }
        Err(e) => {
            warnings.push(format!("the chat template does not compile ({e}); chat requests will be refused"));
            Ok(Served { template: None, note: "chat: off (the template does not compile)".into(), warnings })
        }
    }
}
