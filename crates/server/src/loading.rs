//! The server before the model is ready (llama-server's behaviour): `/health` answers 503
//! `{"status": "loading", ...}` with the load's progress and every other route 503 in OpenAI's
//! error shape; once the full router is set, every request goes to it.

use crate::error::ApiError;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::{Arc, OnceLock};
use tf_core::LoadProgress;
use tower::ServiceExt;

/// What requests see: the loading answers until `ready` is set, then the full router.
pub(crate) struct Gate {
    /// The load's counters, shown by `/health`.
    progress: Arc<LoadProgress>,
    /// The full router, once the model is ready.
    pub(crate) ready: OnceLock<Router>,
}

/// The router serving through `gate`.
pub(crate) fn gated(progress: Arc<LoadProgress>) -> (Router, Arc<Gate>) {
    let gate = Arc::new(Gate { progress, ready: OnceLock::new() });
    (Router::new().fallback(route).with_state(gate.clone()), gate)
}

async fn route(State(gate): State<Arc<Gate>>, req: Request) -> Response {
    match gate.ready.get() {
        Some(router) => match router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
        None if req.uri().path() == "/health" => health(&gate.progress),
        None => loading().into_response(),
    }
}

/// 503 with the load's progress.
fn health(progress: &LoadProgress) -> Response {
    let p = progress.snapshot();
    let body = json!({
        "status": "loading",
        "tensors_loaded": p.tensors_done,
        "tensors_total": p.tensors_total,
        "bytes_loaded": p.bytes_done,
        "bytes_total": p.bytes_total,
        "progress": (p.fraction() * 1000.0).round() / 1000.0,
    });
    (StatusCode::SERVICE_UNAVAILABLE, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// 503: the model is still loading.
fn loading() -> ApiError {
    let msg = "the model is loading; retry when /health answers 200";
    ApiError::with_status(StatusCode::SERVICE_UNAVAILABLE, "model_loading", msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    async fn call(router: &Router, path: &str) -> (StatusCode, serde_json::Value) {
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        let r = router.clone().oneshot(req).await.unwrap();
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn loading_answers_503_with_progress_until_the_router_is_set() {
        let progress = Arc::new(LoadProgress::default());
        progress.set_totals(4, 1000);
        progress.add_tensor(250);
        let (router, gate) = gated(progress);
        let (status, body) = call(&router, "/health").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "loading");
        assert_eq!((body["tensors_loaded"].as_u64(), body["bytes_total"].as_u64()), (Some(1), Some(1000)));
        assert_eq!(body["progress"].as_f64(), Some(0.25));
        let (status, body) = call(&router, "/v1/models").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "model_loading");
        assert_eq!(body["error"]["type"], "server_error");
        let ready = Router::new().route("/health", axum::routing::get(|| async { r#"{"status": "ok"}"# }));
        assert!(gate.ready.set(ready).is_ok());
        let (status, body) = call(&router, "/health").await;
        assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("ok")));
    }
}
