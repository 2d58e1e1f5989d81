//! CORS: without `--allowed-origins` no CORS header is sent; with it, an allowed origin's
//! requests carry `Access-Control-Allow-Origin` and its preflights are answered before the API
//! key check, while another origin gets none.

mod serve_util;

use serve_util::{Resp, Server};

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn preflight(s: &Server, origin: &str) -> Resp {
    let headers = [
        ("Origin", origin),
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "authorization, content-type"),
    ];
    s.raw("OPTIONS", "/v1/completions", &headers, b"")
}

#[test]
fn no_cors_headers_unless_configured() {
    let s = Server::start(&[]);
    let r = s.raw("GET", "/v1/models", &[("Origin", "https://a.example")], b"");
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    let r = preflight(&s, "https://a.example");
    assert_eq!(r.status, 405);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
}

#[test]
fn allowed_origins_get_headers_and_preflights_others_do_not() {
    let s = Server::start(&["--allowed-origins", "https://a.example,http://localhost:3000", "--api-key", "k"]);
    let r = preflight(&s, "http://localhost:3000");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(header(&r, "access-control-allow-origin"), Some("http://localhost:3000"));
    assert_eq!(header(&r, "access-control-allow-methods"), Some("GET, POST, OPTIONS"));
    assert_eq!(header(&r, "access-control-allow-headers"), Some("authorization, content-type"));
    let r = s.raw("GET", "/v1/models", &[("Origin", "https://a.example"), ("Authorization", "Bearer k")], b"");
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("https://a.example"));
    assert_eq!(header(&r, "vary"), Some("origin"));
    // A refusal is readable by the allowed page too.
    let r = s.raw("GET", "/v1/models", &[("Origin", "https://a.example")], b"");
    assert_eq!(r.status, 401);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("https://a.example"));
    let r = preflight(&s, "https://evil.example");
    assert_ne!(r.status, 204);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    let any = Server::start(&["--allowed-origins", "*"]);
    let r = any.raw("GET", "/health", &[("Origin", "https://b.example")], b"");
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
}

#[test]
fn a_bad_origin_list_exits_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["serve", "--model", "x", "--allowed-origins", "a.example/path"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
