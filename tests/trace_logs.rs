//! The log lines of a traced request: with traces exported and a debug filter, every line the
//! real binary logs while it serves a request sent with a `traceparent` names that request's
//! trace, in both log formats, the access log's "started processing request" and "finished
//! processing request" included.

mod common;

use axum::http::StatusCode;
use axum::routing::post;
use common::{Backend, Binary, Location, eventually};
use serde_json::{Value, json};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver on 127.0.0.1 that takes every batch (what is in them is
/// tests/telemetry's concern); its base URL.
async fn receiver() -> String {
    let app = axum::Router::new().route("/v1/traces", post(|| async { StatusCode::OK }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The lines the binary, exporting traces and logging in `format` at a debug filter, logged
/// while it served one call sent with a sampled `traceparent`: from its "started processing
/// request" to its "finished processing request", both included.
async fn lines_of_a_traced_call(format: &str) -> Vec<String> {
    let collector = receiver().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = Binary::start(
        &location,
        &[
            ("RUST_LOG", "info,toolgate=debug,tower_http=debug"),
            ("TOOLGATE_LOG_FORMAT", format),
            ("TOOLGATE_TELEMETRY__OTLP_ENDPOINT", &collector),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    let response = server
        .api
        .client
        .post(format!("{}/tools/echo/call", server.api.base))
        .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
        .json(&json!({"input": {"text": "hello"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The call is the only request the server is sent, so its lines are the ones between the
    // access log's two.
    let lines = eventually("the request's finished line", async || {
        let log = server.log();
        let start = log
            .iter()
            .position(|line| line.contains("started processing request"))?;
        let end = start
            + log[start..]
                .iter()
                .position(|line| line.contains("finished processing request"))?;
        Some(log[start..=end].to_vec())
    })
    .await;
    server.kill();
    lines
}

#[tokio::test]
async fn every_json_line_of_a_traced_request_names_its_trace() {
    let lines = lines_of_a_traced_call("json").await;
    assert!(lines.len() >= 2, "{lines:#?}");
    let mut span_ids = Vec::new();
    for line in &lines {
        let line: Value = serde_json::from_str(line).expect("one JSON object per line");
        assert_eq!(line["trace_id"], TRACE, "{line}");
        let span_id = line["span_id"].as_str().expect("a span id");
        assert_eq!(span_id.len(), 16, "{line}");
        // Toolgate's own span, a child of the caller's, never the caller's.
        assert_ne!(span_id, PARENT, "{line}");
        span_ids.push(span_id.to_owned());
    }
    // Both access lines are written in the request's SERVER span.
    assert_eq!(span_ids.first(), span_ids.last(), "{lines:#?}");
}

#[tokio::test]
async fn every_text_line_of_a_traced_request_names_its_trace() {
    let lines = lines_of_a_traced_call("text").await;
    assert!(lines.len() >= 2, "{lines:#?}");
    for line in &lines {
        let (_, ids) = line
            .split_once(" trace_id=")
            .unwrap_or_else(|| panic!("no trace_id in {line:?}"));
        let (trace_id, span_id) = ids
            .split_once(" span_id=")
            .unwrap_or_else(|| panic!("no span_id in {line:?}"));
        assert_eq!(trace_id, TRACE, "{line}");
        assert_eq!(span_id.len(), 16, "{line}");
        assert_ne!(span_id, PARENT, "{line}");
    }
}
