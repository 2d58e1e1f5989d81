//! The OpenAPI 3.1 document of every route, made from the request and reply types (wire/):
//! served at `/openapi.json` and kept in `docs/openapi.json`.

use crate::wire::chat::ChatFields;
use crate::wire::common::{NoOp, Run, Sampling, Structured};
use crate::wire::completions::CompletionFields;
use crate::wire::other::{DetokenizeRequest, SessionRequest, TokenizeRequest};
use crate::wire::replies::{
    ChatCompletion, Completion, DetokenizeReply, ErrorReply, HealthReply, ModelList, ModelObject, SessionReply,
    TokenizeReply, VersionReply,
};
use crate::wire::responses::{ResponseObject, ResponsesFields};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem, PathsBuilder};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::{ResponseBuilder, ResponsesBuilder};
use utoipa::openapi::schema::{AllOfBuilder, ComponentsBuilder, Object, Schema, Type};
use utoipa::openapi::{ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Ref, RefOr, Required};
use utoipa::{PartialSchema, ToSchema};

/// The statuses a route that reads a JSON body may refuse it with.
const BODY_ERRORS: &[(&str, &str)] = &[
    ("400", "A field is missing, unknown, of the wrong type or out of range; `param` names it."),
    ("404", "Another model was named."),
    ("413", "The body is larger than the limit."),
    ("415", "The body is not application/json."),
    ("429", "The server is at capacity; retry after `Retry-After` seconds."),
    ("503", "The server is loading or shutting down."),
];

/// The whole document.
pub fn document() -> OpenApi {
    let generation = |route: RefOr<Schema>| -> RefOr<Schema> {
        let mut all = AllOfBuilder::new().item(route);
        for part in ["Sampling", "Run", "Structured", "NoOp"] {
            all = all.item(Ref::from_schema_name(part));
        }
        all.into()
    };
    let paths = PathsBuilder::new()
        .path(
            "/v1/completions",
            post("Generate text after one or more prompts.", generation(named("CompletionFields")), "Completion", true),
        )
        .path(
            "/v1/chat/completions",
            post("Answer a conversation.", generation(named("ChatFields")), "ChatCompletion", true),
        )
        .path("/v1/responses", post("OpenAI's Responses API, stateless.", responses_body(), "ResponseObject", true))
        .path(
            "/tokenize",
            post("Token ids of a prompt or of rendered messages.", named("TokenizeRequest"), "TokenizeReply", false),
        )
        .path("/detokenize", post("The text of token ids.", named("DetokenizeRequest"), "DetokenizeReply", false))
        .path(
            "/v1/sessions/{name}",
            with_name(post(
                "Save the cache of a prompt's whole blocks.",
                named("SessionRequest"),
                "SessionReply",
                false,
            )),
        )
        .path(
            "/v1/sessions/{name}/restore",
            with_name(bodiless_post("Check a saved session and warm the prefix cache with it.", "SessionReply")),
        )
        .path("/v1/models", get("The served model.", json_reply("ModelList"), &[]))
        .path("/v1/models/{id}", with_id(get("One model.", json_reply("ModelObject"), &[("404", "No such model.")])))
        .path("/health", get("Ready or not.", json_reply("HealthReply"), &[("503", "Loading or shutting down.")]))
        .path("/metrics", get("Prometheus metrics.", text_reply("text/plain"), &[]))
        .path("/version", get("The server's version.", json_reply("VersionReply"), &[]))
        .path(
            "/openapi.json",
            get(
                "This document.",
                ResponseBuilder::new()
                    .description("The document.")
                    .content(
                        "application/json",
                        ContentBuilder::new().schema(Some(Object::with_type(Type::Object))).build(),
                    )
                    .build(),
                &[],
            ),
        );
    let mut components = ComponentsBuilder::new();
    let mut schemas: Vec<(String, RefOr<Schema>)> = Vec::new();
    collect::<CompletionFields>(&mut schemas);
    collect::<ChatFields>(&mut schemas);
    collect::<Sampling>(&mut schemas);
    collect::<Run>(&mut schemas);
    collect::<Structured>(&mut schemas);
    collect::<NoOp>(&mut schemas);
    collect::<ResponsesFields>(&mut schemas);
    collect::<ResponseObject>(&mut schemas);
    collect::<TokenizeRequest>(&mut schemas);
    collect::<DetokenizeRequest>(&mut schemas);
    collect::<SessionRequest>(&mut schemas);
    collect::<Completion>(&mut schemas);
    collect::<ChatCompletion>(&mut schemas);
    collect::<TokenizeReply>(&mut schemas);
    collect::<DetokenizeReply>(&mut schemas);
    collect::<SessionReply>(&mut schemas);
    collect::<ModelList>(&mut schemas);
    collect::<ModelObject>(&mut schemas);
    collect::<HealthReply>(&mut schemas);
    collect::<VersionReply>(&mut schemas);
    collect::<ErrorReply>(&mut schemas);
    for (name, schema) in schemas {
        components = components.schema(name, schema);
    }
    let info = InfoBuilder::new()
        .title("TensorFold")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some("OpenAI-compatible inference server: completions, chat, responses, tokenization, sessions."))
        .build();
    OpenApiBuilder::new().info(info).paths(paths).components(Some(components.build())).build()
}

/// The document as pretty JSON with a final newline (the form `docs/openapi.json` keeps).
pub fn json() -> String {
    let mut doc = serde_json::to_value(document()).unwrap_or_default();
    crate::openapi_close::close(&mut doc, REPLIES);
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

/// The component schemas of replies (left open: a reply may carry more than they list).
const REPLIES: &[&str] = &[
    "ErrorReply",
    "ErrorDetail",
    "Usage",
    "PromptTokensDetails",
    "CompletionTokensDetails",
    "Completion",
    "CompletionChoice",
    "ChatCompletion",
    "ChatChoice",
    "AssistantMessage",
    "ModelList",
    "ModelObject",
    "TokenizeReply",
    "DetokenizeReply",
    "HealthReply",
    "VersionReply",
    "SessionReply",
    "ResponseObject",
];

/// `T`'s schema under its name, and the schemas it refers to.
fn collect<T: ToSchema + PartialSchema>(out: &mut Vec<(String, RefOr<Schema>)>) {
    out.push((T::name().into_owned(), T::schema()));
    T::schemas(out);
}

/// `/v1/responses`' body: its fields, sampling and the no-op fields.
fn responses_body() -> RefOr<Schema> {
    let mut all = AllOfBuilder::new().item(named("ResponsesFields"));
    for part in ["Sampling", "NoOp"] {
        all = all.item(Ref::from_schema_name(part));
    }
    all.into()
}

fn named(name: &str) -> RefOr<Schema> {
    Ref::from_schema_name(name).into()
}

fn json_reply(name: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description("OK")
        .content("application/json", ContentBuilder::new().schema(Some(named(name))).build())
        .build()
}

fn text_reply(mime: &str) -> utoipa::openapi::Response {
    let text = ContentBuilder::new().schema(Some(Object::with_type(Type::String))).build();
    ResponseBuilder::new().description("OK").content(mime, text).build()
}

fn error_reply(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", ContentBuilder::new().schema(Some(named("ErrorReply"))).build())
        .build()
}

/// A POST route with a JSON body; `streams`: `stream: true` answers with server-sent events.
fn post(summary: &str, body: RefOr<Schema>, reply: &str, streams: bool) -> PathItem {
    let body = RequestBodyBuilder::new()
        .content("application/json", ContentBuilder::new().schema(Some(body)).build())
        .required(Some(Required::True))
        .build();
    let mut ok = ResponseBuilder::new()
        .description("OK")
        .content("application/json", ContentBuilder::new().schema(Some(named(reply))).build());
    if streams {
        let events = ContentBuilder::new().schema(Some(Object::with_type(Type::String))).build();
        ok = ok.content("text/event-stream", events);
    }
    let mut responses = ResponsesBuilder::new().response("200", ok.build());
    for (status, why) in BODY_ERRORS {
        responses = responses.response(*status, error_reply(why));
    }
    let op = OperationBuilder::new().summary(Some(summary)).request_body(Some(body)).responses(responses.build());
    PathItem::new(HttpMethod::Post, op.build())
}

fn bodiless_post(summary: &str, reply: &str) -> PathItem {
    let mut responses = ResponsesBuilder::new().response("200", json_reply(reply));
    let errors = [
        ("400", "A bad name."),
        ("404", "No such session, or sessions are off."),
        ("422", "The file was refused."),
        ("503", "The engine is busy or the server is loading."),
    ];
    for (status, why) in errors {
        responses = responses.response(status, error_reply(why));
    }
    PathItem::new(HttpMethod::Post, OperationBuilder::new().summary(Some(summary)).responses(responses.build()).build())
}

fn get(summary: &str, ok: utoipa::openapi::Response, errors: &[(&str, &str)]) -> PathItem {
    let mut responses = ResponsesBuilder::new().response("200", ok);
    for (status, why) in errors {
        responses = responses.response(*status, error_reply(why));
    }
    responses = responses.response("503", error_reply("The server is loading or shutting down."));
    PathItem::new(HttpMethod::Get, OperationBuilder::new().summary(Some(summary)).responses(responses.build()).build())
}

/// Adds the path parameter `param` to every operation of `item`.
fn with_param(mut item: PathItem, param: &str, what: &str) -> PathItem {
    let p = ParameterBuilder::new()
        .name(param)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(what))
        .schema(Some(Object::with_type(Type::String)))
        .build();
    for op in [&mut item.get, &mut item.post].into_iter().flatten() {
        op.parameters.get_or_insert_with(Vec::new).push(p.clone());
    }
    item
}

fn with_name(item: PathItem) -> PathItem {
    with_param(item, "name", "The session's name (letters, digits, `-`, `_`, `.`).")
}

fn with_id(item: PathItem) -> PathItem {
    with_param(item, "id", "The model's name.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_resolves() {
        let doc = serde_json::to_value(document()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let text = doc.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = r.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "unresolved reference to {name}");
        }
        assert!(doc["paths"]["/v1/chat/completions"]["post"]["requestBody"].is_object());
    }
}
