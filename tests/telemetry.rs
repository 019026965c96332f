//! Traces (issue 22), received over the wire: an OTLP/HTTP receiver on 127.0.0.1 inside the
//! test decodes what the real binary exports, with the OpenTelemetry project's own protobuf
//! types.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use common::upstream::{HttpUpstream, free_port};
use common::{
    Backend, Binary, Location, Site, ci_python, eventually, open_store, repo_root, temp_dir,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::Effect;
use toolgate::dispatch::client_key_scope;
use toolgate::store::{NewCall, Timestamp};

/// A span as received, with the `service.name` of its resource.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
            .map(|v| match v {
                any_value::Value::StringValue(s) => s.clone(),
                any_value::Value::IntValue(i) => i.to_string(),
                any_value::Value::BoolValue(b) => b.to_string(),
                any_value::Value::DoubleValue(d) => d.to_string(),
                other => format!("{other:?}"),
            })
    }

    fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    fn parent_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
}

/// The receiver: every span posted to `/v1/traces`, and the requests' count.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
    requests: Arc<Mutex<usize>>,
    /// The `traceparent` of each webhook delivery posted to `/hook`.
    hooks: Arc<Mutex<Vec<Option<String>>>>,
}

async fn hook(State(collector): State<Collector>, headers: axum::http::HeaderMap) -> StatusCode {
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    collector.hooks.lock().unwrap().push(traceparent);
    StatusCode::NO_CONTENT
}

async fn receive(State(collector): State<Collector>, body: Bytes) -> StatusCode {
    *collector.requests.lock().unwrap() += 1;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut spans = collector.spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    StatusCode::OK
}

impl Collector {
    /// Starts receiving on 127.0.0.1; returns the collector and its base URL.
    async fn start() -> (Collector, String) {
        let collector = Collector::default();
        let app = axum::Router::new()
            .route("/v1/traces", post(receive))
            .route("/hook", post(hook))
            .with_state(collector.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (collector, format!("http://{addr}"))
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits for a span named `name` in `trace_id`.
    async fn span(&self, trace_id: &str, name: &str) -> Received {
        eventually(
            &format!("a span {name:?} in trace {trace_id}"),
            async || {
                self.spans()
                    .into_iter()
                    .find(|s| s.trace_id() == trace_id && s.span.name == name)
            },
        )
        .await
    }
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traced(collector: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "TOOLGATE_TELEMETRY__OTLP_ENDPOINT".to_owned(),
            collector.to_owned(),
        ),
        (
            "TOOLGATE_TELEMETRY__SERVICE_NAME".to_owned(),
            "toolgate-under-test".to_owned(),
        ),
        // Batches leave within 50 ms, so the test does not wait a second per batch.
        ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "50".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn start(location: &Location, env: &[(String, String)]) -> Binary {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Binary::start(location, &env)
}

/// No attribute of any span holds what the caller sent.
fn nothing_leaks(spans: &[Received], secret: &str) {
    for span in spans {
        for kv in &span.span.attributes {
            let shown = format!("{:?}", kv.value);
            assert!(
                !shown.contains(secret),
                "span {:?} has the input in {}",
                span.span.name,
                kv.key
            );
        }
    }
}

/// Posts `body` to `path` with a `traceparent` header naming `trace` and `parent`: the status
/// and the JSON body.
async fn post_traced(
    server: &Binary,
    path: &str,
    (trace, parent): (&str, &str),
    body: Value,
) -> (StatusCode, Value) {
    let response = traced_post(server, path, (trace, parent), &[])
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// A POST to `path` with a sampled `traceparent` naming `trace` and `parent`, and `headers`.
fn traced_post(
    server: &Binary,
    path: &str,
    (trace, parent): (&str, &str),
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let mut request = server
        .api
        .client
        .post(format!("{}{path}", server.api.base))
        .header("traceparent", format!("00-{trace}-{parent}-01"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
}

/// A `tools/call` on `/mcp` (2025-11-25, JSON), with an HTTP `traceparent` when given.
async fn mcp_call(server: &Binary, http_parent: Option<String>, message: Value) -> Value {
    let mut request = server
        .api
        .client
        .post(format!("{}/mcp", server.api.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(parent) = http_parent {
        request = request.header("traceparent", parent);
    }
    let response = request.json(&message).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

/// The text of `/metrics`.
async fn metrics(server: &Binary) -> String {
    let response = server
        .api
        .client
        .get(format!("{}/metrics", server.api.base))
        .send()
        .await
        .unwrap();
    response.text().await.unwrap()
}

/// The binary exporting to `collector`, serving the upstream of `config` (a `[[upstreams]]`
/// entry, in a config file in `data`), once its `traced` tool, `tool`, is listed.
async fn serve_upstream(
    collector: &str,
    data: &std::path::Path,
    config: &str,
    tool: &str,
) -> Binary {
    let path = data.join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    let env = traced(collector, &[]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Binary::start_with(data, &["--config", path.to_str().unwrap()], &env);
    eventually("the upstream's tools", async || {
        let (_, tools) = server.api.get("/tools").await;
        tools["tools"]
            .as_array()?
            .iter()
            .any(|listed| listed["name"] == tool)
            .then_some(())
    })
    .await;
    server
}

#[tokio::test]
async fn a_rest_call_is_a_child_of_the_callers_span_with_its_call_and_attempt_below() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = start(&location, &traced(&url, &[]));
    let (status, body) = post_traced(
        &server,
        "/tools/echo/call",
        (TRACE, PARENT),
        json!({"input": {"text": "a secret input"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let call_id = body["call_id"].as_str().unwrap().to_owned();

    let request = collector.span(TRACE, "POST /tools/{name}/call").await;
    assert_eq!(request.service, "toolgate-under-test");
    assert_eq!(request.span.kind, SpanKind::Server as i32);
    assert_eq!(
        request.parent_id(),
        PARENT,
        "the caller's span is its parent"
    );
    assert_eq!(
        request.attribute("http.route").as_deref(),
        Some("/tools/{name}/call")
    );
    assert_eq!(
        request.attribute("http.response.status_code").as_deref(),
        Some("200")
    );

    let call = collector.span(TRACE, "execute_tool echo").await;
    assert_eq!(call.parent_id(), request.span_id());
    assert_eq!(call.attribute("gen_ai.tool.name").as_deref(), Some("echo"));
    assert_eq!(
        call.attribute("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(call.attribute("toolgate.call_id").as_ref(), Some(&call_id));
    assert_eq!(call.attribute("toolgate.effect").as_deref(), Some("read"));
    assert_eq!(
        call.attribute("toolgate.status").as_deref(),
        Some("completed")
    );

    let attempt = collector.span(TRACE, "attempt 1").await;
    assert_eq!(attempt.parent_id(), call.span_id());

    // The read's record, written behind its answer (batched with others on SQLite), keeps the
    // trace it ran in.
    let record = eventually("the read's record", async || {
        let (status, record) = server.api.get(&format!("/calls/{call_id}")).await;
        (status == StatusCode::OK).then_some(record)
    })
    .await;
    assert_eq!(record["trace_id"], TRACE, "{record}");

    nothing_leaks(&collector.spans(), "a secret input");
}

#[tokio::test]
async fn a_write_commits_under_its_call_and_its_webhook_delivery_links_to_it() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let config = location.data_dir().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[webhooks]]\nurl = \"{url}/hook\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
             allow_private = true\n"
        ),
    )
    .unwrap();
    let env = traced(&url, &[]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Binary::start_with(&location, &["--config", config.to_str().unwrap()], &env);
    let (status, body) = post_traced(
        &server,
        "/tools/send_email/call",
        (TRACE, PARENT),
        json!({"input": {"to": "a@example.com", "subject": "hi", "body": "a secret input"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let call = collector.span(TRACE, "execute_tool send_email").await;
    // The intent and the outcome, each committed under the call.
    for write in ["store commit insert", "store commit finish"] {
        let commit = collector.span(TRACE, write).await;
        assert!(
            commit.parent_id() == call.span_id()
                || collector
                    .spans()
                    .iter()
                    .any(|s| s.span_id() == commit.parent_id() && s.parent_id() == call.span_id()),
            "{write} is under the call"
        );
        let size: u64 = commit
            .attribute("toolgate.store.batch_size")
            .expect("the batch size")
            .parse()
            .unwrap();
        assert!(size >= 1);
    }
    // The delivery: a traceparent in the request, of a CLIENT span linked to the call.
    let sent = eventually("a webhook delivery", async || {
        collector
            .hooks
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .next()
            .cloned()
    })
    .await;
    let span_id = sent.split('-').nth(2).unwrap().to_owned();
    let delivery = eventually("the delivery's span", async || {
        collector
            .spans()
            .into_iter()
            .find(|s| s.span.name == "POST webhook" && s.span_id() == span_id)
    })
    .await;
    assert_eq!(delivery.span.kind, SpanKind::Client as i32);
    assert_eq!(
        delivery.attribute("http.response.status_code").as_deref(),
        Some("204")
    );
    assert!(
        delivery.span.links.iter().any(|link| {
            hex::encode(&link.trace_id) == TRACE && hex::encode(&link.span_id) == call.span_id()
        }),
        "the delivery links to the call"
    );
    nothing_leaks(&collector.spans(), "a secret input");
}

#[tokio::test]
async fn an_mcp_call_follows_the_context_in_its_meta_with_the_conventions_attributes() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = start(&location, &traced(&url, &[]));
    let meta_trace = "0af7651916cd43dd8448eb211c80319c";
    let meta_parent = "b7ad6b7169203331";
    // An HTTP context too: the `_meta` one is the parent, this one a link.
    let body = mcp_call(
        &server,
        Some(format!("00-{TRACE}-{PARENT}-01")),
        json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {
                "name": "echo",
                "arguments": {"text": "a secret input"},
                "_meta": {"traceparent": format!("00-{meta_trace}-{meta_parent}-01")}
            }
        }),
    )
    .await;
    assert_eq!(body["result"]["isError"], false, "{body}");

    let mcp = collector.span(meta_trace, "tools/call echo").await;
    assert_eq!(mcp.span.kind, SpanKind::Server as i32);
    assert_eq!(mcp.parent_id(), meta_parent);
    assert_eq!(
        mcp.attribute("mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(mcp.attribute("gen_ai.tool.name").as_deref(), Some("echo"));
    assert_eq!(
        mcp.attribute("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(mcp.attribute("jsonrpc.request.id").as_deref(), Some("7"));
    assert_eq!(
        mcp.attribute("mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    assert_eq!(mcp.attribute("error.type"), None);
    // The HTTP request's span is linked.
    let http = collector.span(TRACE, "POST /mcp").await;
    assert!(
        mcp.span
            .links
            .iter()
            .any(|link| hex::encode(&link.trace_id) == TRACE
                && hex::encode(&link.span_id) == http.span_id()),
        "the HTTP request's span is linked: {:?}",
        mcp.span.links
    );
    // The call runs under the MCP span.
    let call = collector.span(meta_trace, "execute_tool echo").await;
    assert_eq!(call.parent_id(), mcp.span_id());

    // A result with isError is a `tool_error`.
    let failed = mcp_call(
        &server,
        None,
        json!({
            "jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {
                "name": "echo",
                "arguments": {"text": 5},
                "_meta": {"traceparent": format!("00-{meta_trace}-{meta_parent}-01")}
            }
        }),
    )
    .await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let errored = eventually("the failed call's span", async || {
        collector.spans().into_iter().find(|s| {
            s.span.name == "tools/call echo"
                && s.attribute("jsonrpc.request.id").as_deref() == Some("8")
        })
    })
    .await;
    assert_eq!(
        errored.attribute("error.type").as_deref(),
        Some("tool_error")
    );
    nothing_leaks(&collector.spans(), "a secret input");
}

#[tokio::test]
async fn with_the_collector_down_calls_answer_and_the_dropped_spans_are_counted() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let location = Location::new(Backend::Sqlite).await;
    let server = start(&location, &traced(&url, &[]));
    for n in 0..20 {
        let (status, body) = server
            .api
            .call("echo", json!({"text": format!("{n}")}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let dropped = eventually("the dropped spans counted", async || {
        metrics(&server)
            .await
            .lines()
            .find(|l| l.starts_with("toolgate_trace_spans_total{result=\"dropped_export_failed\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|n| *n >= 20.0)
    })
    .await;
    assert!(dropped >= 20.0);
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("cannot export spans")),
        "the failure is logged once"
    );
}

#[tokio::test]
async fn the_standard_variable_alone_turns_traces_on_and_nothing_turns_them_off() {
    let (collector, url) = Collector::start().await;
    // No [telemetry]: only OTEL_EXPORTER_OTLP_ENDPOINT.
    let location = Location::new(Backend::Sqlite).await;
    let on = start(
        &location,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), url.clone()),
            ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "50".to_owned()),
        ],
    );
    let (status, _) = on.api.call("echo", json!({"text": "on"})).await;
    assert_eq!(status, StatusCode::OK);
    let call = eventually("a span from the standard variable", async || {
        collector
            .spans()
            .into_iter()
            .find(|s| s.span.name == "execute_tool echo")
    })
    .await;
    assert_eq!(call.service, "toolgate");
    on.kill();

    // Neither: nothing is exported, nothing is counted, and nothing is said about traces.
    let before = *collector.requests.lock().unwrap();
    let location = Location::new(Backend::Sqlite).await;
    let off = Binary::start(&location, &[]);
    for _ in 0..5 {
        let (status, _) = off.api.call("echo", json!({"text": "off"})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let scraped = metrics(&off).await;
    assert!(
        !scraped.contains("toolgate_trace_spans_total{"),
        "no span was made: {scraped}"
    );
    assert!(!off.log().iter().any(|l| l.contains("exporting traces")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*collector.requests.lock().unwrap(), before);
}

#[tokio::test]
async fn log_lines_carry_the_trace_and_json_lines_parse() {
    let (_collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = start(&location, &traced(&url, &[("TOOLGATE_LOG_FORMAT", "json")]));
    let (status, _) = server.api.call("echo", json!({"text": "x"})).await;
    assert_eq!(status, StatusCode::OK);
    let lines = server.log();
    let started = lines
        .iter()
        .find(|l| l.contains("listening on"))
        .expect("the start is logged");
    let line: Value = serde_json::from_str(started).expect("one JSON object per line");
    assert_eq!(line["level"], "INFO");
    assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(line["message"].as_str().unwrap().contains("listening on"));
}

#[tokio::test]
async fn a_suspension_is_one_story_the_call_the_decision_and_the_rerun() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = start(&location, &traced(&url, &[]));
    let (status, asked) = post_traced(
        &server,
        "/tools/ask_human/call",
        (TRACE, PARENT),
        json!({"input": {"question": "Deploy?"}}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let call_id = asked["call_id"].as_str().unwrap().to_owned();
    let token = asked["suspension"]["token"].as_str().unwrap().to_owned();

    // The call's record names its trace.
    let (status, record) = server.api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["trace_id"], TRACE, "{record}");
    let call = collector.span(TRACE, "execute_tool ask_human").await;
    assert_eq!(
        call.attribute("toolgate.status").as_deref(),
        Some("suspended")
    );
    assert!(
        !collector
            .spans()
            .iter()
            .any(|s| s.span.name.contains(&token)),
        "no span is named with the token"
    );

    // The decision, later, in a trace of its own.
    let decision_trace = "5b8efff798038103d269b633813fc60c";
    let (status, _) = post_traced(
        &server,
        &format!("/approvals/{token}/approve"),
        (decision_trace, "eee19b7ec3c1b174"),
        json!({"input": {"answer": "yes"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let decision = collector
        .span(decision_trace, "POST /approvals/{token}/approve")
        .await;
    let linked = |span: &Received| {
        span.span.links.iter().any(|link| {
            hex::encode(&link.trace_id) == TRACE && hex::encode(&link.span_id) == call.span_id()
        })
    };
    assert!(
        linked(&decision),
        "the decision links to the call: {:?}",
        decision.span.links
    );
    let rerun = eventually("the re-run's span", async || {
        collector
            .spans()
            .into_iter()
            .find(|s| s.trace_id() == decision_trace && s.span.name == "execute_tool ask_human")
    })
    .await;
    assert_eq!(
        rerun.parent_id(),
        decision.span_id(),
        "the re-run is the decision's child"
    );
    assert!(linked(&rerun), "the re-run links to the call");
    assert_eq!(rerun.attribute("toolgate.call_id"), Some(call_id));
    assert_eq!(
        rerun.attribute("toolgate.status").as_deref(),
        Some("completed")
    );
    nothing_leaks(&collector.spans(), "Deploy?");
}

#[tokio::test]
async fn an_upstream_server_receives_the_context_of_toolgates_client_span() {
    let (collector, url) = Collector::start().await;
    let data = temp_dir();
    let upstream = temp_dir();
    let config = format!(
        "[[upstreams]]\nname = \"files\"\ncommand = [{python:?}, {script:?}, \"--transport\", \
         \"stdio\", \"--dir\", {dir:?}]\n",
        python = ci_python().to_str().unwrap(),
        script = repo_root()
            .join("tests/upstream/server.py")
            .to_str()
            .unwrap(),
        dir = upstream.path().to_str().unwrap(),
    );
    let server = serve_upstream(&url, data.path(), &config, "files__traced").await;
    let (status, body) = post_traced(
        &server,
        "/tools/files__traced/call",
        (TRACE, PARENT),
        json!({"input": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let received = body["output"]["traceparent"].as_str().unwrap().to_owned();

    let client = collector.span(TRACE, "tools/call traced").await;
    assert_eq!(client.span.kind, SpanKind::Client as i32);
    assert_eq!(
        client.attribute("mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        client.attribute("gen_ai.tool.name").as_deref(),
        Some("traced")
    );
    assert_eq!(
        received,
        format!("00-{TRACE}-{}-01", client.span_id()),
        "the upstream got toolgate's client span as its parent"
    );
    assert_eq!(body["output"]["header"], "", "stdio has no headers");
    let attempt = collector.span(TRACE, "attempt 1").await;
    assert_eq!(client.parent_id(), attempt.span_id());
    let call = collector.span(TRACE, "execute_tool files__traced").await;
    assert_eq!(attempt.parent_id(), call.span_id());

    // A tool error upstream: the CLIENT span says so, and the line logged about the failed
    // call carries its trace.
    let failing = "22222222222222222222222222222222";
    let (status, body) = post_traced(
        &server,
        "/tools/files__fail/call",
        (failing, PARENT),
        json!({"input": {"message": "disk on fire"}}),
    )
    .await;
    // A tool's failure is answered 500 `tool_failed`, as on every door.
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["status"], "failed", "{body}");
    let client = collector.span(failing, "tools/call fail").await;
    assert_eq!(
        client.attribute("error.type").as_deref(),
        Some("tool_error")
    );
    let line = eventually("the failure's log line", async || {
        server
            .log()
            .into_iter()
            .find(|line| line.contains("call failed") && line.contains("files__fail"))
    })
    .await;
    assert!(
        line.contains(&format!("trace_id={failing}")) && line.contains(" span_id="),
        "{line}"
    );
}

#[tokio::test]
async fn sampling_is_decided_at_the_root_and_a_callers_decision_is_followed() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    // No new trace is recorded; a caller's sampled one always is, its unsampled one never.
    let server = start(
        &location,
        &traced(&url, &[("TOOLGATE_TELEMETRY__SAMPLE_RATIO", "0.0")]),
    );
    for _ in 0..3 {
        let (status, _) = server.api.call("echo", json!({"text": "new"})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let unsampled = "11111111111111111111111111111111";
    let response = server
        .api
        .client
        .post(format!("{}/tools/echo/call", server.api.base))
        .header("traceparent", format!("00-{unsampled}-{PARENT}-00"))
        .json(&json!({"input": {"text": "not sampled"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (status, _) = post_traced(
        &server,
        "/tools/echo/call",
        (TRACE, PARENT),
        json!({"input": {"text": "sampled"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    collector.span(TRACE, "execute_tool echo").await;
    // Whatever else was exported went out before or with the sampled trace's spans.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let others: Vec<String> = collector
        .spans()
        .iter()
        .filter(|s| s.trace_id() != TRACE)
        .map(|s| format!("{} in {}", s.span.name, s.trace_id()))
        .collect();
    assert!(others.is_empty(), "spans of unsampled traces: {others:?}");
}

#[tokio::test]
async fn only_the_baggage_named_in_the_configuration_becomes_an_attribute() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = start(
        &location,
        &traced(
            &url,
            &[("TOOLGATE_TELEMETRY__BAGGAGE_ATTRIBUTES", "[\"tenant\"]")],
        ),
    );
    let baggage = [("baggage", "tenant=acme,session=s3cr3t")];
    let response = traced_post(&server, "/tools/echo/call", (TRACE, PARENT), &baggage)
        .json(&json!({"input": {"text": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let request = collector.span(TRACE, "POST /tools/{name}/call").await;
    assert_eq!(request.attribute("baggage.tenant").as_deref(), Some("acme"));
    assert_eq!(request.attribute("baggage.session"), None);
    nothing_leaks(&collector.spans(), "s3cr3t");
}

#[tokio::test]
async fn an_upstream_over_streamable_http_gets_the_context_in_its_headers_too() {
    let (collector, url) = Collector::start().await;
    let upstream_dir = temp_dir();
    let upstream = HttpUpstream::start(upstream_dir.path(), free_port()).await;
    let data = temp_dir();
    let config = format!(
        "[[upstreams]]\nname = \"web\"\nurl = {:?}\n",
        upstream.url()
    );
    let server = serve_upstream(&url, data.path(), &config, "web__traced").await;
    let (status, body) = post_traced(
        &server,
        "/tools/web__traced/call",
        (TRACE, PARENT),
        json!({"input": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let client = collector.span(TRACE, "tools/call traced").await;
    assert_eq!(client.span.kind, SpanKind::Client as i32);
    let expected = format!("00-{TRACE}-{}-01", client.span_id());
    assert_eq!(body["output"]["traceparent"], expected.as_str(), "in _meta");
    assert_eq!(
        body["output"]["header"],
        expected.as_str(),
        "in the headers"
    );

    // A call with no trace of its caller's starts one (sample_ratio 1.0): its context goes in
    // both places too.
    let (status, body) = server.api.call("web__traced", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let sent = body["output"]["traceparent"].as_str().unwrap();
    assert!(sent.starts_with("00-") && !sent.contains(TRACE), "{sent}");
    assert_eq!(body["output"]["header"], sent);
}

#[tokio::test]
async fn an_interrupted_call_run_again_by_its_repeat_links_to_the_run_it_lost() {
    let (collector, url) = Collector::start().await;
    let location = Location::new(Backend::Sqlite).await;
    let lost = "55555555555555555555555555555555";
    let lost_span = "1111111111111111";
    {
        // A previous process recorded the intent of a keyed echo in a trace, then died (its
        // store is dropped, never closed).
        let store = open_store(&location).await;
        store
            .insert_call(
                NewCall {
                    call_id: "call_lost".into(),
                    tool: "echo".into(),
                    effect: Effect::Read,
                    caller: None,
                    input: json!({"text": "again"}),
                    idempotency_key: Some(client_key_scope(None, "echo-lost")),
                    attempts: 1,
                    created_at: Timestamp::now(),
                    trace: Some(format!("00-{lost}-{lost_span}-01")),
                },
                None,
            )
            .await
            .unwrap();
    }
    let server = start(&location, &traced(&url, &[]));
    let (_, record) = server.api.get("/calls/call_lost").await;
    assert_eq!(record["status"], "interrupted", "{record}");
    assert_eq!(record["trace_id"], lost);

    let repeat = "66666666666666666666666666666666";
    let key = [("idempotency-key", "echo-lost")];
    let response = traced_post(&server, "/tools/echo/call", (repeat, PARENT), &key)
        .json(&json!({"input": {"text": "again"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["call_id"], "call_lost", "{body}");

    let run = collector.span(repeat, "execute_tool echo").await;
    assert_eq!(
        run.attribute("toolgate.call_id").as_deref(),
        Some("call_lost")
    );
    assert_eq!(
        run.attribute("toolgate.status").as_deref(),
        Some("completed")
    );
    assert!(
        run.span
            .links
            .iter()
            .any(|link| hex::encode(&link.trace_id) == lost
                && hex::encode(&link.span_id) == lost_span),
        "the run links to the one that was interrupted: {:?}",
        run.span.links
    );
}
