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
