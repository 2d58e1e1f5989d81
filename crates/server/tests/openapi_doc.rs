//! `docs/openapi.json` is the document `/openapi.json` serves, made from the request and reply
//! types: this test fails when it is stale. `UPDATE_DOCS=1 cargo test -p tf-server --test
//! openapi_doc` rewrites it.

use std::path::Path;

#[test]
fn openapi_document_in_docs_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let want = tf_server::openapi::json();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "docs/openapi.json is stale; run UPDATE_DOCS=1 cargo test -p tf-server --test openapi_doc");
}

#[test]
fn every_route_documents_its_body_and_errors() {
    let doc: serde_json::Value = serde_json::from_str(&tf_server::openapi::json()).unwrap();
    for route in ["/v1/completions", "/v1/chat/completions", "/v1/responses", "/tokenize", "/detokenize"] {
        let op = &doc["paths"][route]["post"];
        assert!(op["requestBody"]["content"]["application/json"]["schema"].is_object(), "{route}");
        assert!(op["responses"]["400"].is_object(), "{route}");
    }
    let chat = &doc["components"]["schemas"]["ChatFields"]["properties"];
    assert!(chat["messages"].is_object() && chat["tools"].is_object());
}

/// The routes `docs/serve.md`'s table lists, as `METHOD /path` (`.../restore` spelled out).
fn serve_md_routes() -> std::collections::BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/serve.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let table = doc.split("## Routes").nth(1).unwrap().split("\n\n").nth(1).unwrap();
    let mut out = std::collections::BTreeSet::new();
    for row in table.lines().skip(2) {
        let cell = row.split('|').nth(1).unwrap_or_default();
        let mut last = (String::new(), String::new());
        for route in cell.split('`').skip(1).step_by(2) {
            last = match (route.strip_prefix("..."), route.split_once(' ')) {
                (Some(tail), _) => (last.0.clone(), format!("{}{tail}", last.1)),
                (None, Some((method, p))) => (method.to_string(), p.to_string()),
                (None, None) => continue,
            };
            out.insert(format!("{} {}", last.0, last.1));
        }
    }
    out
}

#[test]
fn serve_md_lists_the_documents_routes() {
    let doc: serde_json::Value = serde_json::from_str(&tf_server::openapi::json()).unwrap();
    let mut routes = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    assert_eq!(serve_md_routes(), routes, "docs/serve.md's route table and the OpenAPI document differ");
}
