//! Turning traces on and off, what becomes of spans when the collector is down, sampling,
//! baggage, and the trace in log lines.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{
    Collector, PARENT, TRACE, metrics, nothing_leaks, post_traced, start, traced, traced_post,
};
use crate::common::{Backend, Binary, Location, eventually};

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
            &[(
                "TOOLGATE_TELEMETRY__BAGGAGE_ATTRIBUTES",
                "[\"tenant\", \"note\"]",
            )],
        ),
    );
    // A value as a caller may send it: a line break, markup, thousands of characters.
    let note = format!("line%0Abreak%0D<b>x</b>{}", "y".repeat(3000));
    let baggage = format!("tenant=acme,session=s3cr3t,note={note}");
    let baggage = [("baggage", baggage.as_str())];
    let response = traced_post(&server, "/tools/echo/call", (TRACE, PARENT), &baggage)
        .json(&json!({"input": {"text": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let request = collector.span(TRACE, "POST /tools/{name}/call").await;
    assert_eq!(request.attribute("baggage.tenant").as_deref(), Some("acme"));
    assert_eq!(request.attribute("baggage.session"), None);
    // Capped and cleaned: no control character reaches a span.
    let kept = request.attribute("baggage.note").expect("the note is kept");
    assert!(kept.chars().count() <= 256, "{} characters", kept.len());
    assert!(!kept.chars().any(char::is_control), "{kept:?}");
    assert!(kept.starts_with("line break <b>x</b>yyy"), "{kept:?}");
    nothing_leaks(&collector.spans(), "s3cr3t");
}
