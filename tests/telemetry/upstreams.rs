//! An upstream MCP server, over stdio or Streamable HTTP, receives the context of toolgate's
//! client span.

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use reqwest::StatusCode;
use serde_json::json;

use super::{Collector, PARENT, TRACE, post_traced, serve_upstream};
use crate::common::upstream::{HttpUpstream, free_port};
use crate::common::{ci_python, eventually, repo_root, temp_dir};

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
