//! `GET /openapi.json`: an OpenAPI 3.1 document that a real validator accepts, carrying each
//! tool's own input (and output) schema.
//!
//! The validator is the Python `openapi-spec-validator`, installed into `.ci/venv` by
//! `.ci/test-deps` (which the README's test command runs first).

mod common;

use std::process::Command;

use common::{TestServer, ci_python, temp_dir};
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::ToolSet;

/// Follows a local `$ref` inside `doc`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => doc
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("dangling $ref {reference}")),
        None => schema,
    }
}

/// Every `$ref` in `value`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(obj) => {
            for (key, child) in obj {
                if key == "$ref" {
                    if let Some(target) = child.as_str() {
                        out.push(target.to_owned());
                    }
                } else {
                    refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, out)),
        _ => {}
    }
}

/// Runs openapi-spec-validator on `doc`; Ok when valid, Err with its complaint otherwise.
fn validate(doc: &Value) -> Result<(), String> {
    let dir = temp_dir();
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
    let script = "import json, sys\n\
                  from openapi_spec_validator import validate\n\
                  doc = json.load(open(sys.argv[1]))\n\
                  assert doc['openapi'].startswith('3.1'), doc['openapi']\n\
                  validate(doc)\n";
    let output = Command::new(ci_python())
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python runs");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

async fn document() -> (Value, Value) {
    let dir = temp_dir();
    let server = TestServer::examples(dir.path()).await;
    let (status, doc) = server.api.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let (_, tools) = server.api.get("/tools").await;
    server.stop().await;
    (doc, tools)
}

#[tokio::test]
async fn the_document_passes_an_openapi_3_1_validator() {
    let (doc, _) = document().await;
    assert_eq!(doc["openapi"], "3.1.0");
    validate(&doc).unwrap_or_else(|err| panic!("openapi-spec-validator rejected it:\n{err}"));

    // The validator is not a rubber stamp: a broken copy fails.
    let mut broken = doc.clone();
    broken["paths"]["/tools"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] =
        json!({"$ref": "#/components/schemas/Missing"});
    assert!(validate(&broken).is_err(), "a dangling reference is caught");
}

#[tokio::test]
async fn each_tool_has_an_operation_carrying_its_own_schemas() {
    let (doc, tools) = document().await;
    for tool in tools["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap();
        let op = &doc["paths"][format!("/tools/{name}/call")]["post"];
        assert!(op.is_object(), "no operation for {name}");
        assert_eq!(op["operationId"], format!("call_{name}"));
        let body = &op["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(body["required"], json!(["input"]));
        let input = resolve(&doc, &body["properties"]["input"]);
        // The tool's schema, as served at /tools, minus `$schema` (the document's dialect
        // applies) and with `$defs` moved to components.
        let mut expected = tool["input_schema"].clone();
        expected.as_object_mut().unwrap().remove("$schema");
        expected.as_object_mut().unwrap().remove("$defs");
        assert_eq!(input, &expected, "input schema of {name}");

        let responses = op["responses"].as_object().unwrap();
        for code in ["200", "202", "400", "413", "415", "422", "500"] {
            assert!(responses.contains_key(code), "{name} documents {code}");
        }
        assert!(
            !responses.contains_key("404"),
            "a registered tool is never unknown"
        );
        if !tool["output_schema"].is_null() {
            let output =
                &responses["200"]["content"]["application/json"]["schema"]["properties"]["output"];
            let output = resolve(&doc, output);
            assert_eq!(
                output["required"], tool["output_schema"]["required"],
                "{name}"
            );
        }
    }

    // issue_refund's output refers to a definition: it resolves inside the document.
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(
        all.iter().any(|r| r.contains("tool.issue_refund.output.")),
        "{all:?}"
    );
    for reference in all {
        assert!(
            doc.pointer(reference.trim_start_matches('#')).is_some(),
            "dangling {reference}"
        );
    }
}

/// The document of the example tools, served with one API key (so auth is on).
async fn keyed_document() -> Value {
    let dir = temp_dir();
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), dir.path()).unwrap();
    let key = toolgate::http::auth::ApiKey::new(
        "root",
        toolgate::http::auth::Role::Admin,
        toolgate::http::auth::token_sha256("openapi-test-token"),
    );
    let server = TestServer::start_with(tools, dir.path(), |b| b.api_keys(vec![key])).await;
    let response = server
        .api
        .client
        .get(format!("{}/openapi.json", server.api.base))
        .bearer_auth("openapi-test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let doc = response.json().await.unwrap();
    server.stop().await;
    doc
}

#[tokio::test]
async fn every_fixed_route_is_documented_with_its_error_envelope() {
    let expected = [
        ("/tools", "get"),
        ("/tools/{name}", "get"),
        ("/tools/{name}/call", "post"),
        ("/calls", "get"),
        ("/calls/{call_id}", "get"),
        ("/calls/{call_id}/resolve", "post"),
        ("/approvals", "get"),
        ("/approvals/{token}", "get"),
        ("/approvals/{token}/approve", "post"),
        ("/approvals/{token}/reject", "post"),
        ("/approvals/{token}/complete", "post"),
        ("/openapi.json", "get"),
        ("/metrics", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ];
    let (open_doc, _) = document().await;
    let keyed_doc = keyed_document().await;
    validate(&keyed_doc).unwrap_or_else(|err| panic!("the keyed document is rejected:\n{err}"));
    // With keys: a bearer scheme, required by each protected operation. Without: no security
    // at all, since the server accepts every request (a fuzzer driven by the document must not
    // expect a 401 that never comes).
    assert_eq!(
        keyed_doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert!(open_doc["components"].get("securitySchemes").is_none());
    for doc in [&open_doc, &keyed_doc] {
        assert!(
            doc.get("security").is_none(),
            "no document-wide requirement"
        );
    }
    for (doc, auth) in [(&open_doc, false), (&keyed_doc, true)] {
        for (path, method) in expected {
            let op = &doc["paths"][path][method];
            assert!(op.is_object(), "{method} {path} is documented");
            let health = path == "/healthz" || path == "/readyz";
            let protected = auth && !health;
            assert_eq!(
                op.get("security").cloned(),
                protected.then(|| json!([{"bearer": []}])),
                "{method} {path}, auth {auth}: a bearer token exactly when one is required"
            );
            for code in ["401", "403"] {
                assert_eq!(
                    op["responses"].get(code).is_some(),
                    protected,
                    "{method} {path} documents {code} exactly when it can answer it (auth {auth})"
                );
            }
            assert_eq!(
                op["responses"].get("503").is_some(),
                !health || path == "/readyz",
                "{method} {path} documents 503 exactly when it can answer it"
            );
            for (code, response) in op["responses"].as_object().unwrap() {
                if code.starts_with('4') || code.starts_with('5') {
                    let schema = &response["content"]["application/json"]["schema"];
                    assert_eq!(
                        schema["$ref"], "#/components/schemas/ErrorEnvelope",
                        "{method} {path} {code}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn an_empty_tool_set_still_documents_a_valid_api() {
    let dir = temp_dir();
    let server = TestServer::start(ToolSet::new(), dir.path()).await;
    let (_, doc) = server.api.get("/openapi.json").await;
    server.stop().await;
    validate(&doc).unwrap_or_else(|err| panic!("rejected:\n{err}"));
}

/// How many of the `oneOf` branches of `GET /tools`'s answer `answer` is valid under (a
/// `oneOf` needs exactly one), checked with the document as the root of every `$ref`.
fn tool_list_branches(doc: &Value, answer: &Value) -> usize {
    let schema =
        &doc["paths"]["/tools"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    let base = match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => reference.to_owned(),
        None => "#/paths/~1tools/get/responses/200/content/application~1json/schema".to_owned(),
    };
    let branches = resolve(doc, schema)["oneOf"]
        .as_array()
        .expect("the answer is a oneOf")
        .len();
    (0..branches)
        .filter(|branch| {
            let mut root = doc.clone();
            root["$ref"] = format!("{base}/oneOf/{branch}").into();
            jsonschema::validator_for(&root)
                .expect("the branch compiles")
                .is_valid(answer)
        })
        .count()
}

/// schemathesis checks that each answer fits the document: the tool list in every format,
/// with tools and without, is valid under exactly one branch of its `oneOf`.
#[tokio::test]
async fn every_tool_list_answer_matches_exactly_one_branch() {
    let dir = temp_dir();
    let full = TestServer::examples(dir.path()).await;
    let empty_dir = temp_dir();
    let empty = TestServer::start(ToolSet::new(), empty_dir.path()).await;
    for server in [&full, &empty] {
        let (_, doc) = server.api.get("/openapi.json").await;
        for format in [
            "",
            "openai",
            "openai-responses",
            "anthropic",
            "gemini",
            "mcp",
        ] {
            let path = match format {
                "" => "/tools".to_owned(),
                format => format!("/tools?format={format}"),
            };
            let (status, answer) = server.api.get(&path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(tool_list_branches(&doc, &answer), 1, "{path}: {answer}");
        }
    }
    full.stop().await;
    empty.stop().await;
}

/// A delivery id that is not a number is `400 bad_request`, and the document says so.
#[tokio::test]
async fn a_non_numeric_delivery_id_is_a_documented_400() {
    let dir = temp_dir();
    let server = TestServer::examples(dir.path()).await;
    let (status, body) = server
        .api
        .post("/webhooks/deliveries/not-a-number/retry", json!({}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    common::assert_error(&body, "bad_request");
    let (_, doc) = server.api.get("/openapi.json").await;
    let documented = &doc["paths"]["/webhooks/deliveries/{id}/retry"]["post"]["responses"]["400"];
    assert_eq!(
        documented["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ErrorEnvelope"
    );
    server.stop().await;
}
