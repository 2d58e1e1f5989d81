//! `--api-key`: every route but `/health` needs `Authorization: Bearer KEY`. The key is compared
//! in constant time (only its length can leak); a missing or wrong key gets 401 in OpenAI's shape.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The route that stays open without a key (load balancers probe it).
const OPEN_PATH: &str = "/health";

/// A server's API key; its `Debug` form does not show it.
#[derive(Clone, PartialEq)]
pub struct ApiKey(Vec<u8>);

impl ApiKey {
    /// The key `key`, or `None` when it is empty.
    pub fn new(key: &str) -> Option<ApiKey> {
        (!key.is_empty()).then(|| ApiKey(key.as_bytes().to_vec()))
    }

    /// Whether `given` is the key, in time that depends on the lengths alone.
    pub fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq(&self.0, given)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// Byte equality that reads every byte whatever the first difference (the length is not hidden).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case).
fn bearer(value: &HeaderValue) -> Option<&[u8]> {
    let v = value.as_bytes();
    let (scheme, rest) = v.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    Some(rest.trim_ascii())
}

/// Lets a request through when the server has no key, the route is `/health`, or the request
/// carries the key; answers 401 otherwise.
pub async fn require_key(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &st.limits.api_key else { return next.run(req).await };
    if req.uri().path() == OPEN_PATH {
        return next.run(req).await;
    }
    let given = req.headers().get(header::AUTHORIZATION).and_then(bearer);
    if given.is_some_and(|g| key.matches(g)) {
        return next.run(req).await;
    }
    let msg = match given {
        None => "missing API key: send the header `Authorization: Bearer KEY`",
        Some(_) => "incorrect API key provided",
    };
    let mut r = ApiError::with_status(StatusCode::UNAUTHORIZED, "invalid_api_key", msg).into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly() {
        let key = ApiKey::new("sk-test").unwrap();
        assert!(key.matches(b"sk-test"));
        assert!(!key.matches(b"sk-tesT"));
        assert!(!key.matches(b"sk-tes"));
        assert!(!key.matches(b"sk-test "));
        assert!(!key.matches(b""));
        assert!(ApiKey::new("").is_none());
        assert_eq!(format!("{key:?}"), "ApiKey(..)");
    }

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        let token = |s: &'static str| bearer(&HeaderValue::from_static(s)).map(<[u8]>::to_vec);
        assert_eq!(token("Bearer abc"), Some(b"abc".to_vec()));
        assert_eq!(token("bearer  abc "), Some(b"abc".to_vec()));
        assert_eq!(token("Basic abc"), None);
        assert_eq!(token("Bearer"), None);
        assert_eq!(token("abc"), None);
    }
}
