//! A server under load sheds at once (a tool at its concurrency limit, the server past its
//! in-flight bound) while health answers; the calls it ran are listed newest first.

use super::*;

async fn a_tool_at_its_concurrency_limit_sheds_at_once(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowLookup).unwrap();
    let mut config = DispatchConfig::default();
    config.tools.insert(
        "slow_lookup".into(),
        ToolSettings {
            max_concurrency: 1,
            timeout: Duration::from_millis(700),
            ..ToolSettings::default()
        },
    );
    let server = serve(tools, &location, config).await;
    let api = server.api.clone();
    let first = tokio::spawn(async move { api.call("slow_lookup", json!({})).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = server
        .api
        .client
        .post(format!("{}/tools/slow_lookup/call", server.api.base))
        .json(&json!({"input": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_error(&body, "overloaded");
    let (status, _) = first.await.unwrap();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let (_, calls) = server.api.get("/calls").await;
    assert_eq!(
        calls["calls"].as_array().unwrap().len(),
        1,
        "the shed request left no record"
    );
    server.stop().await;
}

async fn calls_are_listed_newest_first_with_filters(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, body) = api.call("echo", json!({"text": format!("t{i}")})).await;
        ids.push(body["call_id"].clone());
    }
    api.call("ask_human", json!({"question": "?"})).await;
    let (status, list) = api.get("/calls?tool=echo&limit=2").await;
    assert_eq!(status, StatusCode::OK);
    let listed: Vec<&Value> = list["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["call_id"])
        .collect();
    assert_eq!(listed, [&ids[2], &ids[1]]);
    // Summaries: a list carries no inputs or outputs, whose size a caller controls.
    assert!(list["calls"][0].get("input").is_none());
    assert!(list["calls"][0].get("output").is_none());
    assert_eq!(list["calls"][0]["status"], "completed");
    let cursor = list["next_cursor"].as_str().unwrap();
    let (_, rest) = api
        .get(&format!("/calls?tool=echo&limit=2&cursor={cursor}"))
        .await;
    assert_eq!(rest["calls"][0]["call_id"], ids[0]);
    assert_eq!(rest["next_cursor"], Value::Null);
    let (_, suspended) = api.get("/calls?status=suspended").await;
    assert_eq!(suspended["calls"].as_array().unwrap().len(), 1);
    assert_eq!(suspended["calls"][0]["tool"], "ask_human");
    for bad in [
        "/calls?status=sleeping",
        "/calls?limit=0",
        "/calls?colour=red",
    ] {
        let (status, body) = api.get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_error(&body, "bad_request");
    }
    server.stop().await;
}

async fn past_max_in_flight_the_server_sheds_at_once_but_health_answers(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowLookup).unwrap();
    let config = DispatchConfig {
        defaults: ToolSettings {
            timeout: Duration::from_millis(600),
            ..ToolSettings::default()
        },
        ..DispatchConfig::default()
    };
    let server = TestServer::start_with(tools, &location, |builder| {
        builder.max_in_flight(1).dispatch_config(config)
    })
    .await;
    let api = server.api.clone();
    let busy = tokio::spawn(async move { api.call("slow_lookup", json!({})).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_error(&body, "overloaded");
    let (status, _) = server.api.get("/healthz").await;
    assert_eq!(status, StatusCode::OK, "probes are never shed");
    let (status, _) = server.api.get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(busy.await.unwrap().0, StatusCode::GATEWAY_TIMEOUT);
    let (status, _) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::OK, "served again once the slot is free");
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_tool_at_its_concurrency_limit_sheds_at_once;
    #[tokio::test] async fn calls_are_listed_newest_first_with_filters;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn past_max_in_flight_the_server_sheds_at_once_but_health_answers;
}
