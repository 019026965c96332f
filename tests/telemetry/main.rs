//! Traces (issue 22), received over the wire: an OTLP/HTTP receiver on 127.0.0.1 inside the
//! test decodes what the real binary exports, with the OpenTelemetry project's own protobuf
//! types.

#[path = "../common/mod.rs"]
mod common;

mod calls;
mod exporting;
mod upstreams;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use reqwest::StatusCode;
use serde_json::Value;

use common::{Binary, Location, eventually};

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
