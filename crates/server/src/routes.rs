//! The router: OpenAI routes, vLLM's `/tokenize`, `/detokenize` and `/version`, `/health`, `/metrics`, and
//! OpenAI-shaped errors for unknown routes and methods; the API key check and the request log
//! wrap them all.

use crate::api::{ChatInput, blocking, chat, chat_prompt, completions};
use crate::body::json_body;
use crate::error::ApiError;
use crate::fields::int_list;
use crate::request::{bad_id, check_model, encode};
use crate::state::AppState;
use crate::wire::other::{DetokenizeRequest, TokenizeRequest};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get as get_route, post};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// All routes over `state`, with the body size cap, the API key check, response counting and the
/// request log (outermost, so refused requests are logged too).
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(crate::responses::responses))
        .route("/v1/models", get_route(models))
        .route("/v1/models/{*id}", get_route(model))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get_route(health))
        .route("/metrics", get_route(metrics))
        .route("/version", get_route(version))
        .route("/openapi.json", get_route(openapi))
        .route("/v1/sessions/{name}", post(crate::sessions::save))
        .route("/v1/sessions/{name}/restore", post(crate::sessions::restore))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), length_cap))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::auth::require_key))
        .layer(axum::middleware::map_response_with_state(state.clone(), count_response))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::cors::cors))
        .layer(axum::middleware::from_fn(crate::access_log::log_requests))
        .with_state(state)
}

/// Refuses a declared body length over the cap before reading any of it (the body limit
/// layer catches bodies whose length is not declared while they are read).
async fn length_cap(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let limit = st.limits.max_body_bytes;
    if declared.is_some_and(|n| n > limit as u64) {
        let msg = format!("the request body is larger than the limit of {limit} bytes");
        return ApiError::with_status(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", msg).into_response();
    }
    next.run(req).await
}

async fn count_response(State(st): State<Arc<AppState>>, r: Response) -> Response {
    st.metrics.count_response(r.status().as_u16());
    r
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::with_status(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this route")
}

fn json_response(v: Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// The served model's object, as `/v1/models` lists it.
fn model_object(st: &AppState) -> Value {
    json!({"id": st.model.name, "object": "model", "created": 0, "owned_by": "tensorfold",
           "root": st.model.name, "max_model_len": st.max_model_len()})
}

async fn models(State(st): State<Arc<AppState>>) -> Response {
    json_response(json!({"object": "list", "data": [model_object(&st)]}))
}

/// `GET /v1/models/{id}`: the served model's object, 404 for any other id.
async fn model(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Response, ApiError> {
    match id == st.model.name {
        true => Ok(json_response(model_object(&st))),
        false => Err(ApiError::unknown_model(&id)),
    }
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    match st.shutting_down.load(Ordering::Relaxed) {
        true => ApiError::unavailable().into_response(),
        false => json_response(json!({"status": "ok"})),
    }
}

/// `GET /version`: `{"version": ...}`, as vLLM answers it.
async fn version() -> Response {
    json_response(json!({"version": env!("CARGO_PKG_VERSION")}))
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let text = st.metrics.render(&st.engine.stats, st.in_flight());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `GET /openapi.json`: the document of every route (docs/openapi.json holds the same).
async fn openapi(State(st): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], st.openapi.clone()).into_response()
}

/// `POST /tokenize`: `{"prompt": text}` or `{"messages": [...]}` to checked ids.
async fn tokenize(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(&headers, body, st.limits.max_body_bytes)?;
    let prep = st.clone();
    let ids = blocking(move || {
        let o: TokenizeRequest = crate::wire::read(&body.value)?;
        check_model(o.model.as_deref(), &prep)?;
        if o.messages.is_some() {
            let chat = ChatInput {
                messages: o.messages.as_ref(),
                add_generation_prompt: o.add_generation_prompt,
                continue_final_message: o.continue_final_message,
                reasoning_effort: None,
            };
            return chat_prompt(&prep, &chat, &body.raw, o.add_special_tokens.unwrap_or(false));
        }
        let text = o.prompt.as_deref().ok_or_else(|| ApiError::invalid("prompt", "is required (or messages)"))?;
        encode(&prep, "prompt", text, o.add_special_tokens.unwrap_or(true))
    })
    .await?;
    Ok(json_response(json!({"count": ids.len(), "max_model_len": st.max_model_len(), "tokens": ids.as_slice()})))
}

/// `POST /detokenize`: `{"tokens": [ids]}` (checked) to text.
async fn detokenize(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(&headers, body, st.limits.max_body_bytes)?;
    let o: DetokenizeRequest = crate::wire::read(&body.value)?;
    check_model(o.model.as_deref(), &st)?;
    let tokens = o.tokens.filter(|t| !t.is_null()).ok_or_else(|| ApiError::invalid("tokens", "is required"))?;
    let raw = int_list(&tokens, "tokens")?;
    let ids = st.model.vocab.check(&raw).map_err(|e| ApiError::invalid(format!("tokens[{}]", e.index), bad_id(&e)))?;
    let tok = st.model.tokenizer.as_ref().ok_or_else(|| ApiError::invalid("tokens", "this model has no tokenizer"))?;
    let text = tok.decode(ids.as_slice(), false).map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
    Ok(json_response(json!({ "prompt": text })))
}
