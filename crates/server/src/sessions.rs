//! Saved sessions over HTTP: `POST /v1/sessions/{name}` with `{"prompt": text or ids}` saves
//! the K/V of the prompt's whole blocks under `--session-dir`; `POST /v1/sessions/{name}/restore`
//! checks the whole file (`session::read`: header against the running model, exact size, payload
//! digest, finite K/V, ids) and only then puts its blocks into the prefix cache, so a later
//! request starting with that prompt is served from it, exactly as a fresh prefill; a refused
//! file is 422 naming what failed, with the cache untouched.

use crate::api::blocking;
use crate::body::json_body;
use crate::error::ApiError;
use crate::fields::int_list;
use crate::request::{bad_id, both_prompts, check_model, encode};
use crate::state::AppState;
use crate::wire::other::SessionRequest;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use tf_engine::session::{self, SessionError, confined_path};

fn session_path(st: &AppState, name: &str) -> Result<std::path::PathBuf, ApiError> {
    let dir = st
        .limits
        .session_dir
        .as_ref()
        .ok_or_else(|| ApiError::not_found("sessions are disabled: start the server with --session-dir DIR"))?;
    confined_path(dir, name).map_err(|e| ApiError::invalid("name", e.to_string()))
}

fn ok(name: &str, tokens: usize) -> Response {
    let body = json!({"object": "session", "name": name, "tokens": tokens}).to_string();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `POST /v1/sessions/{name}`: save the prompt's whole blocks.
pub async fn save(
    State(st): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let path = session_path(&st, &name)?;
    let body = json_body(&headers, body, st.limits.max_body_bytes)?;
    let prep = st.clone();
    let tokens = blocking(move || {
        let o: SessionRequest = crate::wire::read(&body.value)?;
        check_model(o.model.as_deref(), &prep)?;
        let nonnull = |v: Option<Value>| v.filter(|v| !v.is_null());
        let (prompt, ids) = (nonnull(o.prompt), nonnull(o.prompt_token_ids));
        if prompt.is_some() && ids.is_some() {
            return Err(both_prompts());
        }
        let ids = match prompt.as_ref().or(ids.as_ref()) {
            Some(Value::String(text)) => encode(&prep, "prompt", text, true)?,
            Some(v) => {
                let raw = int_list(v, "prompt")?;
                prep.model
                    .vocab
                    .check(&raw)
                    .map_err(|e| ApiError::invalid(format!("prompt[{}]", e.index), bad_id(&e)))?
            }
            None => return Err(ApiError::invalid("prompt", "is required (text or token ids)")),
        };
        prep.engine.save_session(ids, path).map_err(|e| ApiError::invalid("prompt", e))
    })
    .await?;
    Ok(ok(&name, tokens))
}

/// `POST /v1/sessions/{name}/restore`: check the file and warm the prefix cache with it.
pub async fn restore(State(st): State<Arc<AppState>>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let path = session_path(&st, &name)?;
    let prep = st.clone();
    let shown = name.clone();
    let tokens = blocking(move || {
        let layout = prep.engine.session_layout.clone();
        let checked = session::read(&path, &layout).map_err(|e| match e {
            SessionError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ApiError::not_found(format!("no session named '{shown}'"))
            }
            other => ApiError::with_status(StatusCode::UNPROCESSABLE_ENTITY, "invalid_session", other.to_string()),
        })?;
        prep.engine
            .restore_session(checked)
            .map_err(|e| ApiError::with_status(StatusCode::SERVICE_UNAVAILABLE, "busy", e))
    })
    .await?;
    Ok(ok(&name, tokens))
}
