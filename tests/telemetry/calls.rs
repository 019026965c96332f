//! A call's spans: a REST call under its caller's span, a write and its webhook delivery, an MCP
//! call following its `_meta`, a suspension's story, and a repeat that runs a lost call again.

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::Effect;
use toolgate::dispatch::client_key_scope;
use toolgate::store::{NewCall, Timestamp};

use super::{
    Collector, PARENT, Received, TRACE, mcp_call, nothing_leaks, post_traced, start, traced,
    traced_post,
};
use crate::common::{Backend, Binary, Location, Site, eventually, open_store};

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
