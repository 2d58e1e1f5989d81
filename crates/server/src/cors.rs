//! CORS for browser clients (`--allowed-origins`): a request from an allowed `Origin` gets
//! `Access-Control-Allow-Origin`, and its preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered 204 with the methods and headers the API takes,
//! before the API key check (a preflight carries no key). Without the switch, or from another
//! origin, no CORS header is sent and the browser keeps the response from the page.

use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Methods a preflight is told the API takes.
const METHODS: &str = "GET, POST, OPTIONS";
/// Request headers a preflight is told the API takes.
const HEADERS: &str = "authorization, content-type";
/// Seconds a browser may cache a preflight's answer.
const MAX_AGE: &str = "600";

/// The origins allowed to read responses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    /// `*`: any origin.
    Any,
    /// These exact origins (`scheme://host[:port]`).
    List(Vec<String>),
}

impl Origins {
    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if allowed.
    fn allow(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        match self {
            Origins::Any => Some(HeaderValue::from_static("*")),
            Origins::List(l) => l.iter().any(|o| origin.as_bytes() == o.as_bytes()).then(|| origin.clone()),
        }
    }
}

/// Parses `--allowed-origins`: `*`, or a comma-separated list of `http(s)://host[:port]`.
pub fn parse_origins(s: &str) -> Result<Origins, String> {
    if s.trim() == "*" {
        return Ok(Origins::Any);
    }
    let list: Vec<String> = s.split(',').map(|o| o.trim().to_string()).filter(|o| !o.is_empty()).collect();
    if list.is_empty() {
        return Err("expected * or a comma-separated list of origins".into());
    }
    for o in &list {
        let rest = o.strip_prefix("https://").or_else(|| o.strip_prefix("http://"));
        let ok = rest.is_some_and(|r| !r.is_empty() && !r.contains(['/', '?', '#', ' ', '*']));
        if !ok || HeaderValue::from_str(o).is_err() {
            return Err(format!("{o:?} is not an origin: expected http(s)://host[:port], or *"));
        }
    }
    Ok(Origins::List(list))
}

/// Adds CORS headers for allowed origins and answers their preflights.
pub async fn cors(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let allowed =
        st.limits.allowed_origins.as_ref().zip(req.headers().get(header::ORIGIN)).and_then(|(o, v)| o.allow(v));
    let Some(allow) = allowed else { return next.run(req).await };
    let preflight =
        req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight { StatusCode::NO_CONTENT.into_response() } else { next.run(req).await };
    let h = resp.headers_mut();
    add(h, allow);
    if preflight {
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(METHODS));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(HEADERS));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE));
    }
    resp
}

fn add(h: &mut HeaderMap, allow: HeaderValue) {
    let any = allow == "*";
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    if !any {
        h.append(header::VARY, HeaderValue::from_static("origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_origins("*"), Ok(Origins::Any));
        let l = parse_origins("https://a.example, http://localhost:3000").unwrap();
        assert_eq!(l, Origins::List(vec!["https://a.example".into(), "http://localhost:3000".into()]));
        assert!(l.allow(&HeaderValue::from_static("http://localhost:3000")).is_some());
        assert!(l.allow(&HeaderValue::from_static("http://localhost:3001")).is_none());
        for bad in ["", "a.example", "https://a.example/", "ftp://x", "https://", "https://*.x"] {
            assert!(parse_origins(bad).is_err(), "{bad}");
        }
    }
}
