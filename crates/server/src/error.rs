//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, each naming the
//! request field at fault where there is one.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Seconds a client told 429 should wait before it retries (`Retry-After`).
pub const RETRY_AFTER_SECS: u64 = 1;

/// A refused or failed request, rendered as an OpenAI error body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable reason.
    pub message: String,
    /// The request field at fault, if any.
    pub param: Option<String>,
    /// A short machine-readable code.
    pub code: &'static str,
}

impl ApiError {
    /// 400: a known field has a bad value.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        let param = param.into();
        let message = format!("{param}: {}", message.into());
        ApiError { status: StatusCode::BAD_REQUEST, message, param: Some(param), code: "invalid_value" }
    }

    /// The same error with its field path's leading `from` (a whole segment) replaced by `to`.
    pub fn under(mut self, from: &str, to: &str) -> ApiError {
        if let Some(p) = &self.param
            && let Some(rest) = p.strip_prefix(from)
            && (rest.is_empty() || rest.starts_with(['.', '[']))
        {
            let renamed = format!("{to}{rest}");
            self.message = self.message.replacen(p.as_str(), &renamed, 1);
            self.param = Some(renamed);
        }
        self
    }

    /// 400: the request as a whole is malformed (not JSON, not an object).
    pub fn malformed(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), param: None, code: "invalid_request" }
    }

    /// 404: an unknown route.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, message: message.into(), param: None, code: "not_found" }
    }

    /// 404: a model this server does not serve.
    pub fn unknown_model(name: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("the model `{name}` does not exist"),
            param: Some("model".into()),
            code: "model_not_found",
        }
    }

    /// 429: the queue is full.
    pub fn queue_full(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!("the server is at capacity ({limit} sequences running or queued); retry later"),
            param: None,
            code: "queue_full",
        }
    }

    /// 503: the server is shutting down.
    pub fn unavailable() -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the server is shutting down".into(),
            param: None,
            code: "shutting_down",
        }
    }

    /// 500: something on our side went wrong.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            param: None,
            code: "internal_error",
        }
    }

    /// Any other status, e.g. 405, 413 or 415.
    pub fn with_status(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), param: None, code }
    }

    /// OpenAI's `type` for this status.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            429 => "rate_limit_error",
            500..=599 => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The error body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    /// The JSON body; every 429 carries `Retry-After`.
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut r = (self.status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_the_field_in_openai_shape() {
        let e = ApiError::invalid("top_p", "must be in (0, 1]");
        let b = e.body();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(b["error"]["param"], "top_p");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert!(b["error"]["message"].as_str().is_some_and(|m| m.starts_with("top_p")));
    }

    #[test]
    fn queue_full_is_a_rate_limit() {
        let e = ApiError::queue_full(3);
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.body()["error"]["type"], "rate_limit_error");
        let r = e.into_response();
        assert_eq!(r.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
        let r = ApiError::unavailable().into_response();
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
