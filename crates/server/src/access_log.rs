//! One `tracing` line per request (method, path, status, prompt and completion tokens, latency),
//! written when the response body has been sent or dropped, so a stream's line counts its tokens
//! and its whole duration. Handlers report token counts through the request's [`Tally`].

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

/// A request's token counts, filled by its handler (a request extension).
#[derive(Clone, Debug, Default)]
pub struct Tally(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    prompt: AtomicUsize,
    completion: AtomicUsize,
}

impl Tally {
    /// Records the request's prompt tokens (as its `usage` counts them).
    pub fn set_prompt(&self, n: usize) {
        self.0.prompt.store(n, Ordering::Relaxed);
    }

    /// Records the tokens generated over every sequence of the request.
    pub fn set_completion(&self, n: usize) {
        self.0.completion.store(n, Ordering::Relaxed);
    }
}

/// Gives the request a [`Tally`] and logs it once its response is over.
pub async fn log_requests(mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let tally = Tally::default();
    req.extensions_mut().insert(tally.clone());
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let resp = next.run(req).await;
    let line = Line { method, path, status: resp.status(), started, tally };
    resp.map(|inner| Body::new(Logged { inner, _line: line }))
}

/// What one log line says; written when dropped.
struct Line {
    method: Method,
    path: String,
    status: StatusCode,
    started: Instant,
    tally: Tally,
}

impl Drop for Line {
    fn drop(&mut self) {
        tracing::info!(
            target: "tensorfold::request",
            method = %self.method,
            path = %self.path,
            status = self.status.as_u16(),
            prompt_tokens = self.tally.0.prompt.load(Ordering::Relaxed),
            completion_tokens = self.tally.0.completion.load(Ordering::Relaxed),
            latency_ms = format_args!("{:.1}", self.started.elapsed().as_secs_f64() * 1e3),
            "request"
        );
    }
}

/// A response body that writes its [`Line`] when dropped. `inner` is declared first so it is
/// dropped first: a stream's generation reports its tokens before the line is written.
struct Logged {
    inner: Body,
    _line: Line,
}

impl HttpBody for Logged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
