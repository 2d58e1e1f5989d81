//! The HTTP side of a pull: GET requests to the hub with redirects followed by hand (bounded, a
//! loop refused, http and https only) so that the token goes only to the endpoint's own origin.

use crate::config::{HubConfig, Token};
use crate::error::{HubError, Result};
use ureq::Body;
use ureq::http::Response;

/// A hub client: one connection pool, the endpoint, the token.
pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<Token>,
    max_redirects: usize,
}

/// A response after redirects, with the host that gave it (for messages).
pub struct Reply {
    /// The response (any status; the caller decides).
    pub response: Response<Body>,
    /// The host that answered, `scheme://host[:port]`.
    pub origin: String,
}

impl Client {
    /// A client for `cfg`'s endpoint; refuses an endpoint that is not an http(s) URL.
    pub fn new(cfg: &HubConfig) -> Result<Client> {
        let endpoint = cfg.endpoint.trim_end_matches('/').to_string();
        if origin(&endpoint).is_none() {
            return Err(HubError::Network {
                what: format!("HF_ENDPOINT {endpoint:?}"),
                why: "not an http:// or https:// URL".into(),
            });
        }
        let proxy = match &cfg.proxy {
            Some(p) => Some(
                ureq::Proxy::new(p)
                    .map_err(|e| HubError::Network { what: "the proxy URL".into(), why: e.to_string() })?,
            ),
            None => None,
        };
        let agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .proxy(proxy)
            .accept_encoding("identity")
            .user_agent(concat!("tensorfold/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(cfg.limits.connect_timeout))
            .timeout_recv_response(Some(cfg.limits.read_timeout))
            .timeout_per_read(Some(cfg.limits.read_timeout))
            .build()
            .new_agent();
        Ok(Client { agent, endpoint, token: cfg.token.clone(), max_redirects: cfg.limits.max_redirects })
    }

    /// The endpoint, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// GETs `url` (from byte `from` on when given), following redirects; `what` names the
    /// request in errors.
    pub fn get(&self, url: &str, from: Option<u64>, what: &str) -> Result<Reply> {
        let mut url = url.to_string();
        let mut seen = vec![url.clone()];
        loop {
            let here = origin(&url).ok_or_else(|| redirect(what, "a URL that is not http or https"))?;
            let mut req = self.agent.get(&url);
            if let Some(from) = from.filter(|&f| f > 0) {
                req = req.header("Range", format!("bytes={from}-"));
            }
            if let Some(t) = &self.token
                && origin(&self.endpoint).as_deref() == Some(here.as_str())
            {
                req = req.header("Authorization", t.bearer());
            }
            let response = req.call().map_err(|e| HubError::Network { what: what.to_string(), why: e.to_string() })?;
            if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
                return Ok(Reply { response, origin: here });
            }
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| redirect(what, "a redirect without a readable Location"))?;
            url =
                join(&url, location).ok_or_else(|| redirect(what, "a redirect to a URL that is not http or https"))?;
            if seen.contains(&url) {
                return Err(redirect(what, "a redirect loop"));
            }
            if seen.len() > self.max_redirects {
                return Err(redirect(what, &format!("more than {} redirects", self.max_redirects)));
            }
            seen.push(url.clone());
        }
    }
}

fn redirect(what: &str, why: &str) -> HubError {
    HubError::Redirect { what: what.to_string(), why: format!("refused {why}") }
}

/// `scheme://authority` of an http or https URL (scheme lowercased).
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(format!("{scheme}://{authority}"))
}

/// `location` resolved against `base`; `None` when it is not an http or https URL.
fn join(base: &str, location: &str) -> Option<String> {
    let loc = location.trim();
    if loc.starts_with("//") {
        let scheme = base.split_once("://")?.0;
        return origin(&format!("{scheme}:{loc}")).map(|_| format!("{scheme}:{loc}"));
    }
    if has_scheme(loc) {
        return origin(loc).map(|_| loc.to_string());
    }
    let base_origin = origin(base)?;
    if loc.starts_with('/') {
        return Some(format!("{base_origin}{loc}"));
    }
    let path = &base[base_origin.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
    Some(format!("{base_origin}{dir}{loc}"))
}

/// Whether `s` starts with a URL scheme (`letter *(letter / digit / + - .) ":"`).
fn has_scheme(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once(':') else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Percent-encodes one path segment (or a whole path with `keep_slash`), as the Python client
/// quotes repo file names and revisions.
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_and_refuse_other_schemes() {
        let base = "https://hub.example/org/name/resolve/main/a.bin?x=1";
        assert_eq!(join(base, "https://cdn.example/x").as_deref(), Some("https://cdn.example/x"));
        assert_eq!(join(base, "/api/x").as_deref(), Some("https://hub.example/api/x"));
        assert_eq!(join(base, "//cdn.example/y").as_deref(), Some("https://cdn.example/y"));
        assert_eq!(join(base, "b.bin").as_deref(), Some("https://hub.example/org/name/resolve/main/b.bin"));
        for bad in ["file:///etc/passwd", "ftp://x/y", "javascript:alert(1)", "https://user@host/x", "//"] {
            assert_eq!(join(base, bad), None, "{bad}");
        }
    }

    #[test]
    fn origins() {
        assert_eq!(origin("HTTP://127.0.0.1:8080/x?y").as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(origin("https://h").as_deref(), Some("https://h"));
        assert_eq!(origin("file:///x"), None);
    }

    #[test]
    fn encoding_keeps_unreserved() {
        assert_eq!(encode("a b/c.gguf", true), "a%20b/c.gguf");
        assert_eq!(encode("refs/pr/1", false), "refs%2Fpr%2F1");
    }
}
