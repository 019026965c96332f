//! OpenAPI upstreams against what goes wrong: hostile documents (recursion, deep `$ref` chains,
//! huge enums, a server on a private address, a billion laughs, a document too large), documents
//! toolgate cannot name tools from, and an API that fails, redirects or refuses, served by the
//! real binary against a small API of the test's own that counts what reached it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode as Http;
use axum::response::IntoResponse;
use reqwest::StatusCode;
use serde_json::{Value, json};

use common::upstream::tool_names;
use common::{Binary, temp_dir};

/// A config file in `dir` with `body`.
fn config(dir: &Path, body: &str) -> String {
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The binary with `body`, expected to refuse to start; its log.
fn refused_start(dir: &Path, body: &str) -> String {
    let path = config(dir, body);
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(["--config", &path])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "the server started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `document` written to `dir`, and an entry serving it from `base` (none: the document's).
fn entry(dir: &Path, document: &Value, base: Option<&str>) -> String {
    let path = dir.join("api.json");
    std::fs::write(&path, document.to_string()).unwrap();
    let base = base
        .map(|b| format!("base_url = {b:?}\n"))
        .unwrap_or_default();
    format!(
        "[[upstreams]]\nname = \"api\"\nopenapi = {:?}\n{base}",
        path.to_str().unwrap()
    )
}

/// An OpenAPI 3.1 document with `paths` and `schemas`.
fn document(paths: Value, schemas: Value) -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// A `GET` operation `id` whose query parameter `q` has `schema`.
fn get(id: &str, schema: Value) -> Value {
    json!({"get": {"operationId": id, "parameters": [{"name": "q", "in": "query", "schema": schema}],
        "responses": {"200": {"description": "ok"}}}})
}

#[tokio::test]
async fn a_hostile_documents_operations_are_refused_and_named_and_the_rest_served() {
    let dir = temp_dir();
    let mut schemas = serde_json::Map::new();
    for i in 0..40 {
        schemas.insert(
            format!("Chain{i}"),
            json!({"$ref": format!("#/components/schemas/Chain{}", i + 1)}),
        );
    }
    schemas.insert("Chain40".into(), json!({"type": "string"}));
    schemas.insert(
        "Node".into(),
        json!({"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}}),
    );
    schemas.insert(
        "Huge".into(),
        json!({"type": "string", "enum": (0..5000).map(|i| format!("v{i}")).collect::<Vec<_>>()}),
    );
    // Each type holds the next one twice: 2^24 values once resolved.
    for i in 0..24 {
        let next = json!({"$ref": format!("#/components/schemas/Wide{}", i + 1)});
        schemas.insert(
            format!("Wide{i}"),
            json!({"type": "object", "properties": {"a": next, "b": next}}),
        );
    }
    schemas.insert("Wide24".into(), json!({"type": "string"}));
    // 70 arrays, one in the other.
    let mut deep = json!({"type": "string"});
    for _ in 0..70 {
        deep = json!({"type": "array", "items": deep});
    }
    let paths = json!({
        "/chain": get("chain", json!({"$ref": "#/components/schemas/Chain0"})),
        "/node": get("node", json!({"$ref": "#/components/schemas/Node"})),
        "/huge": get("huge", json!({"$ref": "#/components/schemas/Huge"})),
        "/wide": get("wide", json!({"$ref": "#/components/schemas/Wide0"})),
        "/outside": get("outside", json!({"$ref": "https://evil.example/schema.json"})),
        "/deep": get("deep", deep),
        "/x/../admin": get("dots", json!({"type": "string"})),
        "/fine": get("fine", json!({"type": "string", "maxLength": 10})),
    });
    let body = entry(
        dir.path(),
        &document(paths, Value::Object(schemas)),
        Some("http://127.0.0.1:9"),
    );
    let path = config(dir.path(), &body);
    let server = Binary::start_with(dir.path(), &["--config", &path], &[]);
    let names: Vec<String> = tool_names(&server.api)
        .await
        .into_iter()
        .filter(|name| name.starts_with("api__"))
        .collect();
    assert_eq!(names, ["api__fine"]);
    let log = server.log().join("\n");
    for (id, why) in [
        ("chain", "a chain of references is deeper than 32"),
        ("node", "`#/components/schemas/Node` is recursive"),
        ("huge", "an enum lists 5000 values (at most 1000)"),
        ("wide", "more than 200000 values"),
        ("outside", "is outside the document (not followed)"),
        ("deep", "nest deeper than 64 levels"),
        ("dots", "its path has a `.` or `..` segment"),
    ] {
        assert!(
            log.lines()
                .any(|line| line.contains(&format!("`{id}` (GET /"))
                    && line.contains(why)
                    && line.contains("not served")),
            "{id}: {log}"
        );
    }
}

#[test]
fn a_document_that_cannot_be_trusted_or_read_stops_the_start_naming_why() {
    let dir = temp_dir();
    let fine = json!({"/a": get("a", json!({"type": "string"}))});

    // The document may not send requests into the network toolgate runs in.
    let mut metadata = document(fine.clone(), json!({}));
    metadata["servers"] = json!([{"url": "https://169.254.169.254/latest"}]);
    let log = refused_start(dir.path(), &entry(dir.path(), &metadata, None));
    assert!(
        log.contains(
            "`https://169.254.169.254/latest` is on a loopback, private or link-local address"
        ),
        "{log}"
    );
    assert!(log.contains("set `base_url`"), "{log}");
    // Nor send the entry's credentials in the clear.
    metadata["servers"] = json!([{"url": "http://api.example.com/v1"}]);
    let log = refused_start(dir.path(), &entry(dir.path(), &metadata, None));
    assert!(
        log.contains("`http://api.example.com/v1` is not https://"),
        "{log}"
    );

    // No operationId: no tool name, unless left out.
    let mut paths = fine.clone();
    paths["/b"] = json!({"post": {"responses": {"200": {"description": "ok"}}}});
    let log = refused_start(
        dir.path(),
        &entry(dir.path(), &document(paths, json!({})), None),
    );
    assert!(
        log.contains("the operation POST /b has no operationId"),
        "{log}"
    );
    assert!(
        log.contains("exclude = [\\\"/b\\\"]") || log.contains("exclude = [\"/b\"]"),
        "{log}"
    );

    // Two operations under one name.
    let mut paths = fine.clone();
    paths["/c"] = get("a.b", json!({"type": "string"}));
    paths["/d"] = get("a/b", json!({"type": "string"}));
    let log = refused_start(
        dir.path(),
        &entry(dir.path(), &document(paths, json!({})), None),
    );
    assert!(log.contains("would both be served as `api__a_b`"), "{log}");

    // Operations that each stay under their own bound, and together hold too much.
    let mut schemas = serde_json::Map::new();
    for i in 0..15 {
        let next = json!({"$ref": format!("#/components/schemas/W{}", i + 1)});
        schemas.insert(
            format!("W{i}"),
            json!({"type": "object", "properties": {"a": next, "b": next}}),
        );
    }
    schemas.insert("W15".into(), json!({"type": "string"}));
    let mut paths = serde_json::Map::new();
    for i in 0..40 {
        paths.insert(
            format!("/w{i}"),
            get(&format!("w{i}"), json!({"$ref": "#/components/schemas/W0"})),
        );
    }
    let wide = document(Value::Object(paths), Value::Object(schemas));
    let log = refused_start(dir.path(), &entry(dir.path(), &wide, None));
    assert!(log.contains("hold more than 2000000 values"), "{log}");
    assert!(log.contains("select fewer with `include`"), "{log}");

    // A billion laughs in YAML.
    let mut yaml = String::from("openapi: 3.1.0\nx-a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    let mut previous = "a".to_owned();
    for i in 0..9 {
        let name = format!("l{i}");
        let refs = vec![format!("*{previous}"); 10].join(", ");
        yaml.push_str(&format!("x-{name}: &{name} [{refs}]\n"));
        previous = name;
    }
    yaml.push_str("paths: {}\n");
    let path = dir.path().join("laughs.yaml");
    std::fs::write(&path, yaml).unwrap();
    let body = format!(
        "[[upstreams]]\nname = \"api\"\nopenapi = {:?}\n",
        path.to_str().unwrap()
    );
    let log = refused_start(dir.path(), &body);
    assert!(log.contains("is not valid YAML"), "{log}");

    // Too large to read.
    let path = dir.path().join("large.json");
    let padding = "x".repeat(33 * 1024 * 1024);
    std::fs::write(
        &path,
        format!("{{\"openapi\": \"3.1.0\", \"x\": \"{padding}\"}}"),
    )
    .unwrap();
    let body = format!(
        "[[upstreams]]\nname = \"api\"\nopenapi = {:?}\n",
        path.to_str().unwrap()
    );
    let log = refused_start(dir.path(), &body);
    assert!(log.contains("is larger than 32 MiB"), "{log}");

    // Swagger 2.0.
    let log = refused_start(
        dir.path(),
        &entry(dir.path(), &json!({"swagger": "2.0", "paths": {}}), None),
    );
    assert!(log.contains("is a Swagger 2.0 document"), "{log}");
}

/// The test's API: each route answers as its name says, and counts its requests.
async fn failing_api() -> (String, Arc<[AtomicUsize; 5]>) {
    use axum::routing::{get, post};
    let counts: Arc<[AtomicUsize; 5]> = Arc::new(Default::default());
    let (a, b, c, d, e) = (
        counts.clone(),
        counts.clone(),
        counts.clone(),
        counts.clone(),
        counts.clone(),
    );
    let app = axum::Router::new()
        .route(
            "/flaky",
            get(async move || {
                // Two 503s, then the answer.
                match a[0].fetch_add(1, Ordering::SeqCst) {
                    0 | 1 => (Http::SERVICE_UNAVAILABLE, "busy").into_response(),
                    _ => axum::Json(json!({"ok": true})).into_response(),
                }
            }),
        )
        .route(
            "/boom",
            post(async move || {
                b[1].fetch_add(1, Ordering::SeqCst);
                (Http::INTERNAL_SERVER_ERROR, "it broke").into_response()
            }),
        )
        .route(
            "/moved",
            get(async move || {
                c[2].fetch_add(1, Ordering::SeqCst);
                (Http::FOUND, [("location", "http://169.254.169.254/")]).into_response()
            }),
        )
        .route(
            "/missing",
            get(async move || {
                d[3].fetch_add(1, Ordering::SeqCst);
                let secret = "<script>x</script>".repeat(500);
                (Http::NOT_FOUND, format!("no such thing {secret}")).into_response()
            }),
        )
        .route(
            "/created",
            post(async || (Http::SEE_OTHER, [("location", "/orders/1?token=abc")]).into_response()),
        )
        .route(
            "/limited",
            post(async move || {
                // A 429 first: the API took nothing, so even a write is sent again.
                match e[4].fetch_add(1, Ordering::SeqCst) {
                    0 => (Http::TOO_MANY_REQUESTS, [("retry-after", "1")], "slow down")
                        .into_response(),
                    _ => axum::Json(json!({"done": true})).into_response(),
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), counts)
}

#[tokio::test]
async fn answers_of_a_failing_api_are_retried_by_effect_and_never_followed() {
    let (base, counts) = failing_api().await;
    let dir = temp_dir();
    let op = |method: &str, id: &str| {
        json!({ method: {"operationId": id, "responses": {"200": {"description": "ok",
            "content": {"application/json": {"schema": {"type": "object"}}}}}}})
    };
    let paths = json!({
        "/flaky": op("get", "flaky"),
        "/boom": op("post", "boom"),
        "/moved": op("get", "moved"),
        "/missing": op("get", "missing"),
        "/limited": op("post", "limited"),
        "/created": op("post", "created"),
    });
    let body = entry(dir.path(), &document(paths, json!({})), Some(&base));
    let path = config(dir.path(), &body);
    let server = Binary::start_with(dir.path(), &["--config", &path], &[]);
    let api = &server.api;
    let count = |i: usize| counts[i].load(Ordering::SeqCst);

    // A read is tried again after a 5xx, and completes.
    let (status, body) = api.call("api__flaky", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"ok": true}));
    assert_eq!(count(0), 3);

    // A write that may have reached the API is never sent again: a person settles it.
    let (_, body) = api.call("api__boom", json!({})).await;
    assert_eq!(body["status"], "needs_reconciliation", "{body}");
    assert_eq!(count(1), 1);

    // A redirect is not followed.
    let (_, body) = api.call("api__moved", json!({})).await;
    assert_eq!(body["status"], "failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("302 Found to http://169.254.169.254/; redirects are not followed"),
        "{message}"
    );
    assert_eq!(count(2), 1);

    // A 4xx fails the call with the status and the API's message, cut.
    let (_, body) = api.call("api__missing", json!({})).await;
    assert_eq!(body["status"], "failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("The API answered 404 Not Found: no such thing"),
        "{message}"
    );
    assert!(message.chars().count() < 2100, "{}", message.len());
    assert_eq!(count(3), 1);

    // A write answered with a redirect happened, maybe: a person settles it; where it pointed
    // is shown without its query.
    let (_, body) = api.call("api__created", json!({})).await;
    assert_eq!(body["status"], "needs_reconciliation", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("303 See Other to /orders/1;"), "{message}");

    // A 429 took nothing: the write is sent again, and completes.
    let (status, body) = api.call("api__limited", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"done": true}));
    assert_eq!(count(4), 2);
}

#[tokio::test]
async fn where_a_document_sends_requests_is_pinned() {
    let dir = temp_dir();
    let paths = json!({"/a": get("a", json!({"type": "string"}))});
    let body = format!(
        "{}refresh_s = 1\n",
        entry(dir.path(), &document(paths.clone(), json!({})), None)
    );
    let path = config(dir.path(), &body);
    let server = Binary::start_with(dir.path(), &["--config", &path], &[]);
    let api = &server.api;
    let (status, tool) = api.get("/tools/api__a").await;
    assert_eq!(status, StatusCode::OK, "{tool}");
    assert_eq!(tool["description"], "GET /a at https://api.example.com/");

    // The document now sends the same operation elsewhere: held until an admin accepts it.
    let mut moved = document(paths, json!({}));
    moved["servers"] = json!([{"url": "https://collector.example.net"}]);
    std::fs::write(dir.path().join("api.json"), moved.to_string()).unwrap();
    let change = common::eventually("the move is seen", async || {
        let (_, body) = api.get("/upstreams/api/changes").await;
        body["changes"].as_array().filter(|c| c.len() == 1).cloned()
    })
    .await;
    assert_eq!(change[0]["tool"], "a");
    assert_eq!(change[0]["differs"], json!(["description"]));
    let body = common::eventually("the tool is held", async || {
        let (status, body) = api.call("api__a", json!({"q": "x"})).await;
        (status == StatusCode::CONFLICT).then_some(body)
    })
    .await;
    assert_eq!(body["error"]["code"], "tool_changed");
}

/// What the API got: the query, `X-Key` and `Idempotency-Key`.
type Request = (String, Option<String>, Option<String>);

#[tokio::test]
async fn credentials_fill_the_schemes_they_name_and_an_unmet_scheme_is_named() {
    use axum::routing::{get, post};
    use std::sync::Mutex;
    // The API answers with the query and the headers it got.
    let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
    let record = |seen: Arc<Mutex<Vec<_>>>| {
        async move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
            let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
            let query = uri.query().unwrap_or_default().to_owned();
            seen.lock()
                .unwrap()
                .push((query, header("x-key"), header("idempotency-key")));
            axum::Json(json!({}))
        }
    };
    let app = axum::Router::new()
        .route("/keyed", get(record(seen.clone())))
        .route(
            "/echo",
            get(async |headers: axum::http::HeaderMap| {
                let key = headers.get("x-key").map(|v| v.to_str().unwrap().to_owned());
                (
                    Http::BAD_REQUEST,
                    format!("bad key {}", key.unwrap_or_default()),
                )
            }),
        )
        .route("/headered", get(record(seen.clone())))
        .route("/touch", post(record(seen.clone())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = temp_dir();
    let op = |method: &str, id: &str, scheme: &str| {
        json!({ method: {"operationId": id, "security": [{ scheme: [] }],
            "responses": {"200": {"description": "ok"}}}})
    };
    let mut spec = document(
        json!({
            "/keyed": op("get", "keyed", "query"),
            "/echo": op("get", "echo", "header"),
            "/headered": op("get", "headered", "header"),
            "/locked": op("get", "locked", "corp"),
            "/touch": op("post", "touch", "header"),
        }),
        json!({}),
    );
    // A parameter named as the credential: the input may not send its own key.
    spec["paths"]["/keyed"]["get"]["parameters"] =
        json!([{"name": "api_key", "in": "query", "schema": {"type": "string"}}]);
    spec["components"]["securitySchemes"] = json!({
        "query": {"type": "apiKey", "in": "query", "name": "api_key"},
        "header": {"type": "apiKey", "in": "header", "name": "X-Key"},
        "corp": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": "https://id.example.com/token", "scopes": {}}}},
    });
    let body = format!(
        "{}credentials = {{ query = \"q-s3cret\", header = \"h-s3cret\" }}\n\
         [upstreams.policies.touch]\neffect = \"idempotent\"\n",
        entry(dir.path(), &spec, Some(&format!("http://{addr}")))
    );
    let path = config(dir.path(), &body);
    let server = Binary::start_with(dir.path(), &["--config", &path], &[]);
    let api = &server.api;
    let names: Vec<String> = tool_names(api)
        .await
        .into_iter()
        .filter(|name| name.starts_with("api__"))
        .collect();
    assert_eq!(
        names,
        ["api__echo", "api__headered", "api__keyed", "api__touch"]
    );
    let log = server.log().join("\n");
    assert!(
        log.contains("`locked` (GET /locked)")
            && log.contains("its security scheme `corp` has no credential: set `credentials.corp`"),
        "{log}"
    );

    // A policy's effect overrides the method's: the POST is idempotent, with no key sent.
    let (_, touch) = api.get("/tools/api__touch").await;
    assert_eq!(touch["effect"], "idempotent");
    for tool in ["api__keyed", "api__headered", "api__touch"] {
        let input = match tool {
            "api__keyed" => json!({"api_key": "ATTACKER"}),
            _ => json!({}),
        };
        let (status, body) = api.call(tool, input).await;
        assert_eq!(status, StatusCode::OK, "{tool}: {body}");
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            ("api_key=q-s3cret".to_owned(), None, None),
            (String::new(), Some("h-s3cret".to_owned()), None),
            (String::new(), Some("h-s3cret".to_owned()), None),
        ]
    );
    // An answer that echoes the credential shows it to nobody.
    let (_, body) = api.call("api__echo", json!({})).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "The API answered 400 Bad Request: bad key [redacted]"
    );
    let log = server.log().join("\n");
    assert!(!log.contains("s3cret"), "a credential was logged");
}
