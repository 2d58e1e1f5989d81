//! Reading a request body as a JSON object: 415 for another content type, 413 past the size
//! cap (the body limit layer enforces it while reading), 400 for malformed JSON.

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

/// A JSON object body and its raw bytes (for order-preserving reads of chat messages).
pub struct JsonBody {
    /// The parsed object.
    pub value: Value,
    /// The bytes as received.
    pub raw: Bytes,
}

/// Checks the content type, the size and the syntax of a body; `limit` is only for the message.
pub fn json_body(headers: &HeaderMap, body: Result<Bytes, BytesRejection>, limit: usize) -> Result<JsonBody, ApiError> {
    let raw = body.map_err(|r| match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::with_status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is larger than the limit of {limit} bytes"),
        ),
        status => ApiError::with_status(status, "bad_body", r.body_text()),
    })?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        let msg = format!("Content-Type must be application/json, got {content_type:?}");
        return Err(ApiError::with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", msg));
    }
    match serde_json::from_slice::<Value>(&raw) {
        Ok(value @ Value::Object(_)) => Ok(JsonBody { value, raw }),
        Ok(_) => Err(ApiError::malformed("the body must be a JSON object")),
        Err(e) => Err(ApiError::malformed(format!("malformed JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        h
    }

    #[test]
    fn content_type_and_syntax_are_checked() {
        let ok = json_body(&headers("application/json; charset=utf-8"), Ok(Bytes::from_static(b"{\"a\":1}")), 10);
        assert_eq!(ok.unwrap().value["a"], 1);
        let e = json_body(&headers("text/plain"), Ok(Bytes::from_static(b"{}")), 10).err().unwrap();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        for bad in [&b"{"[..], b"[1]", b"\xff\xfe", b"{\"a\": \"\xc3\x28\"}", b"{\"a\": \"\\ud800\"}"] {
            let e = json_body(&headers("application/json"), Ok(Bytes::copy_from_slice(bad)), 10).err().unwrap();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
