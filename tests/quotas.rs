//! Quotas per principal, against real servers on 127.0.0.1: a rate (`calls_per_minute`,
//! `burst`) answers `429 rate_limited` with `Retry-After` and the RateLimit fields over REST and
//! a rate-limited tool result over MCP; a replay of an idempotency key spends nothing;
//! `max_running` and `max_held` (held `?wait=` requests and `/events` streams) refuse at once;
//! a key's own quota and a tool's own quota; three replicas on one PostgreSQL share one bucket;
//! and `toolgate_rate_limited_total` counts the refusals.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Api, Backend, Location, TestServer, assert_error};
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::config::ExamplesConfig;
use toolgate::dispatch::quota::{QuotaConfig, QuotaSettings};
use toolgate::dispatch::{DispatchConfig, ToolSettings};
use toolgate::http::auth::Role;

const AGENT: &str = "quota-agent-token-4f1c";
const VIP: &str = "quota-vip-token-9a2e";
const ADMIN: &str = "quota-admin-token-77d0";
const APPROVER: &str = "quota-approver-token-3b5a";

/// A rate of `per_minute` with `burst`, and nothing else.
fn rate(per_minute: u32, burst: u32) -> QuotaConfig {
    QuotaConfig {
        calls_per_minute: Some(per_minute),
        burst: Some(burst),
        ..QuotaConfig::default()
    }
}

/// The example tools (`send_email` taking `email_delay_ms`), keys `agent`, `vip`, an admin and
/// an approver, every principal's quotas `defaults`, `vip`'s own `vip`, and `tools`' own.
async fn server(
    location: &Location,
    defaults: QuotaConfig,
    vip: QuotaConfig,
    tools: &[(&str, QuotaConfig)],
    email_delay_ms: u64,
) -> TestServer {
    let keys = common::api_keys(&[
        ("agent", Role::Caller, AGENT),
        ("vip", Role::Caller, VIP),
        ("root", Role::Admin, ADMIN),
        ("ops", Role::Approver, APPROVER),
    ]);
    let dispatch = DispatchConfig {
        quotas: QuotaSettings::new(defaults, [("vip".to_owned(), vip)]),
        tools: tools
            .iter()
            .map(|(name, quotas)| {
                let settings = ToolSettings {
                    quotas: *quotas,
                    ..ToolSettings::default()
                };
                (name.to_string(), settings)
            })
            .collect::<HashMap<_, _>>(),
        ..DispatchConfig::default()
    };
    let examples = ExamplesConfig {
        send_email_delay_ms: email_delay_ms,
        ..ExamplesConfig::default()
    };
    let tools = common::example_tools_with(location, &examples);
    TestServer::start_with(tools, location, |builder| {
        builder.api_keys(keys).dispatch_config(dispatch)
    })
    .await
}

/// An answer's status, the headers a refusal carries, and its body.
struct Answer {
    status: StatusCode,
    headers: HashMap<&'static str, String>,
    body: Value,
}

async fn answer(response: reqwest::Response) -> Answer {
    let mut headers = HashMap::new();
    for name in [
        "retry-after",
        "ratelimit-policy",
        "ratelimit",
        "idempotent-replayed",
    ] {
        if let Some(value) = response.headers().get(name) {
            headers.insert(name, value.to_str().unwrap().to_owned());
        }
    }
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        body,
    }
}

/// `POST /tools/{tool}/call` as `token`, with an idempotency key if given.
async fn call(api: &Api, token: &str, tool: &str, input: Value, key: Option<&str>) -> Answer {
    let mut request = api
        .client
        .post(format!("{}/tools/{tool}/call", api.base))
        .bearer_auth(token)
        .json(&json!({ "input": input }));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    answer(request.send().await.unwrap()).await
}

async fn echo(api: &Api, token: &str) -> Answer {
    call(api, token, "echo", json!({"text": "hi"}), None).await
}

/// `GET path` as `token`.
async fn get(api: &Api, token: &str, path: &str) -> Answer {
    answer(open(api, token, path).await).await
}

/// `GET path` as `token`, its body not read yet (a stream stays open while it is kept).
async fn open(api: &Api, token: &str, path: &str) -> reqwest::Response {
    let request = api
        .client
        .get(format!("{}{path}", api.base))
        .bearer_auth(token);
    request.send().await.unwrap()
}

/// A `tools/call` over `/mcp` as `token`; its JSON-RPC result.
async fn mcp_call(api: &Api, token: &str, tool: &str, arguments: Value) -> Value {
    let params = json!({"name": tool, "arguments": arguments});
    let (status, _, body) = common::mcp_request(api, token, "tools/call", params).await;
    assert_eq!(status, StatusCode::OK);
    body.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("a result: {body}"))
}

/// The value of one series of `/metrics` (0 when it is not there yet).
async fn metric(api: &Api, series: &str) -> u64 {
    let text = open(api, ADMIN, "/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_rate_answers_429_with_its_headers_over_rest_and_mcp() {
    let location = Location::new(Backend::Sqlite).await;
    // 6 a minute: a call costs 10 s, and 2 may go at once.
    let server = server(&location, rate(6, 2), QuotaConfig::default(), &[], 0).await;
    let api = &server.api;
    for _ in 0..2 {
        let ok = echo(api, AGENT).await;
        assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    }
    let refused = echo(api, AGENT).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let details = assert_error(&refused.body, "rate_limited");
    assert_eq!(details["quota"], "calls_per_minute");
    assert_eq!(
        (details["limit"].as_u64(), details["burst"].as_u64()),
        (Some(6), Some(2))
    );
    // The next cell is about 10 s away: never promised earlier, rounded up to whole seconds.
    let wait: u64 = refused.headers["retry-after"].parse().unwrap();
    assert!((9..=10).contains(&wait), "Retry-After {wait}");
    assert_eq!(details["retry_after_s"], wait);
    assert_eq!(refused.headers["ratelimit-policy"], "\"calls\";q=2;w=20");
    assert_eq!(
        refused.headers["ratelimit"],
        format!("\"calls\";r=0;t={wait}")
    );

    // The same key over MCP meets the same bucket: a tool error it can wait out.
    let result = mcp_call(api, AGENT, "echo", json!({"text": "hi"})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["_meta"]["dev.toolgate/status"], "rate_limited");
    let wait_ms = result["_meta"]["dev.toolgate/retryAfterMs"]
        .as_u64()
        .unwrap();
    assert!((9_000..=10_000).contains(&wait_ms), "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Retry in") && text.contains("rate_limited"),
        "{text}"
    );

    // Another key has a bucket of its own; nothing refused was recorded (reads are recorded
    // behind their answer, so looked for until they are).
    assert_eq!(echo(api, VIP).await.status, StatusCode::OK);
    common::eventually("three calls recorded", async || {
        (location.stored_calls().await.len() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(location.stored_calls().await.len(), 3);
    server.stop().await;
}

#[tokio::test]
async fn a_replay_of_an_idempotency_key_is_not_counted() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, rate(6, 2), QuotaConfig::default(), &[], 0).await;
    let api = &server.api;
    let input = json!({"text": "once"});
    let first = call(api, AGENT, "echo", input.clone(), Some("k-1")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    for _ in 0..4 {
        let replay = call(api, AGENT, "echo", input.clone(), Some("k-1")).await;
        assert_eq!(replay.status, StatusCode::OK, "{}", replay.body);
        assert_eq!(replay.headers["idempotent-replayed"], "true");
    }
    // The replays spent nothing: one new call is left of the burst, then none.
    let second = call(api, AGENT, "echo", input.clone(), Some("k-2")).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    let third = call(api, AGENT, "echo", input.clone(), Some("k-3")).await;
    assert_eq!(
        third.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        third.body
    );
    // With the quota spent, a replay is still answered from its record: it spends nothing, so
    // nothing refuses it (a client retrying a lost answer gets it).
    let replay = call(api, AGENT, "echo", input, Some("k-1")).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.body);
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    server.stop().await;
}

#[tokio::test]
async fn max_running_refuses_a_call_while_the_principal_runs_its_limit() {
    let location = Location::new(Backend::Sqlite).await;
    let running = QuotaConfig {
        max_running: Some(1),
        ..QuotaConfig::default()
    };
    let server = server(&location, running, QuotaConfig::default(), &[], 1_500).await;
    let api = server.api.clone();
    let email = json!({"to": "ann@example.com", "subject": "slow", "body": "takes a while"});
    let slow = tokio::spawn(async move { call(&api, AGENT, "send_email", email, None).await });
    // Once the email runs, the key's next call is refused; another key's is not.
    let refused = common::eventually("the email runs", async || {
        let answer = echo(&server.api, AGENT).await;
        (answer.status == StatusCode::TOO_MANY_REQUESTS).then_some(answer)
    })
    .await;
    let details = assert_error(&refused.body, "rate_limited");
    assert_eq!(details["quota"], "max_running");
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(
        refused.headers["ratelimit-policy"],
        "\"running\";q=1;qu=\"concurrent-requests\""
    );
    assert_eq!(echo(&server.api, VIP).await.status, StatusCode::OK);
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    assert_eq!(echo(&server.api, AGENT).await.status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn max_held_counts_waits_and_streams_and_refuses_at_once() {
    let location = Location::new(Backend::Sqlite).await;
    let held = QuotaConfig {
        max_held: Some(2),
        ..QuotaConfig::default()
    };
    let server = server(&location, held, QuotaConfig::default(), &[], 0).await;
    let api = &server.api;
    let series = "toolgate_rate_limited_total{tool=\"\",quota=\"max_held\"} ";
    let refusals_before = metric(api, series).await;
    let asked = call(api, AGENT, "ask_human", json!({"question": "Hold?"}), None).await;
    assert_eq!(asked.status, StatusCode::ACCEPTED, "{}", asked.body);
    let call_id = asked.body["call_id"].as_str().unwrap().to_owned();

    // One stream open and one wait held: the key's two.
    let stream = open(api, AGENT, "/events").await;
    assert_eq!(stream.status(), StatusCode::OK);
    let waiter = {
        let api = api.clone();
        let path = format!("/calls/{call_id}?wait=30");
        tokio::spawn(async move { get(&api, AGENT, &path).await })
    };
    common::eventually("the wait is held", async || {
        (metric(api, "toolgate_waiters ").await >= 1).then_some(())
    })
    .await;

    // A third is refused at once, however long it asked to wait, and so is a third stream.
    let started = std::time::Instant::now();
    let third = get(api, AGENT, &format!("/calls/{call_id}?wait=30")).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        assert_error(&third.body, "rate_limited")["quota"],
        "max_held"
    );
    assert_eq!(third.headers["retry-after"], "1");
    assert_eq!(
        third.headers["ratelimit-policy"],
        "\"held\";q=2;qu=\"concurrent-requests\""
    );
    assert_eq!(third.headers["ratelimit"], "\"held\";r=0");
    let another = get(api, AGENT, "/events").await;
    assert_eq!(another.status, StatusCode::TOO_MANY_REQUESTS);
    // A call asking to wait is refused before it runs.
    let before = location.stored_calls().await.len();
    let gated = api
        .client
        .post(format!("{}/tools/ask_human/call?wait=5", api.base))
        .bearer_auth(AGENT)
        .json(&json!({"input": {"question": "Refused?"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(gated.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(location.stored_calls().await.len(), before, "nothing ran");
    // Over MCP, an await that would be held is refused the same way.
    let result = mcp_call(
        api,
        AGENT,
        "toolgate_await_call",
        json!({"call_id": call_id, "wait_seconds": 5}),
    )
    .await;
    assert_eq!(
        result["_meta"]["dev.toolgate/status"], "rate_limited",
        "{result}"
    );
    assert_eq!(metric(api, series).await - refusals_before, 4);
    // Without a wait nothing is held, so nothing is refused; another key has its own count.
    assert_eq!(
        get(api, AGENT, &format!("/calls/{call_id}")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(api, VIP, "/calls?limit=1").await.status,
        StatusCode::FORBIDDEN
    );

    // A closed stream is counted no more.
    drop(stream);
    let again = common::eventually("the stream's count is given back", async || {
        let response = open(api, AGENT, "/events").await;
        (response.status() == StatusCode::OK).then_some(response)
    })
    .await;
    drop(again);
    waiter.abort();
    server.stop().await;
}

#[tokio::test]
async fn a_keys_own_quota_and_a_tools_own_quota() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(
        &location,
        rate(1, 1),
        rate(600, 20),
        &[("send_email", rate(1, 1))],
        0,
    )
    .await;
    let api = &server.api;
    // `agent` has the defaults: one call, then 429 for a minute.
    assert_eq!(echo(api, AGENT).await.status, StatusCode::OK);
    let refused = echo(api, AGENT).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = refused.headers["retry-after"].parse().unwrap();
    assert!((59..=60).contains(&wait), "{wait}");
    // `vip`'s own table wins: ten at once.
    for _ in 0..10 {
        assert_eq!(echo(api, VIP).await.status, StatusCode::OK);
    }
    // `send_email`'s own quota holds for `vip` too, named as the tool's.
    let series = "toolgate_rate_limited_total{tool=\"send_email\",quota=\"calls_per_minute\"} ";
    let email = json!({"to": "ann@example.com", "subject": "s", "body": "b"});
    let sent = call(api, VIP, "send_email", email.clone(), None).await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    let refused = call(api, VIP, "send_email", email, None).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let details = assert_error(&refused.body, "rate_limited");
    assert_eq!(details["tool"], "send_email");
    assert_eq!(
        refused.headers["ratelimit-policy"],
        "\"calls.send_email\";q=1;w=60"
    );
    assert_eq!(common::outbox(&location).len(), 1);
    assert_eq!(metric(api, series).await, 1);
    server.stop().await;
}

#[tokio::test]
async fn an_approval_and_its_rerun_are_not_counted() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, rate(1, 1), QuotaConfig::default(), &[], 0).await;
    let api = &server.api;
    let asked = call(api, AGENT, "ask_human", json!({"question": "Ok?"}), None).await;
    assert_eq!(asked.status, StatusCode::ACCEPTED, "{}", asked.body);
    assert_eq!(echo(api, AGENT).await.status, StatusCode::TOO_MANY_REQUESTS);
    let token = asked.body["suspension"]["token"].as_str().unwrap();
    let approved = api
        .client
        .post(format!("{}/approvals/{token}/approve", api.base))
        .bearer_auth(APPROVER)
        .json(&json!({"input": {"answer": "Yes."}}))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), StatusCode::OK);
    // Health probes are never counted either.
    for _ in 0..3 {
        let probe = api
            .client
            .get(format!("{}/healthz", api.base))
            .send()
            .await
            .unwrap();
        assert_eq!(probe.status(), StatusCode::OK);
    }
    server.stop().await;
}

#[tokio::test]
async fn three_replicas_on_postgresql_share_one_bucket() {
    let location = Location::new(Backend::Postgres).await;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(server(&location, rate(6, 3), QuotaConfig::default(), &[], 0).await);
    }
    // One keyed call, replayed on the two other replicas: the replays give their cells back.
    let input = json!({"text": "once"});
    for server in &replicas {
        let answer = call(&server.api, AGENT, "echo", input.clone(), Some("shared-1")).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    // Twelve calls, round robin over three replicas: each alone would admit its own burst of 3
    // (9 in all, 8 after the keyed call); sharing one bucket, they admit the 2 it has left.
    let mut admitted = 0;
    let mut waits = Vec::new();
    for n in 0..12 {
        let answer = echo(&replicas[n % 3].api, AGENT).await;
        match answer.status {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                waits.push(answer.headers["retry-after"].parse::<u64>().unwrap());
            }
            other => panic!("{other}: {}", answer.body),
        }
    }
    assert_eq!(admitted, 2, "one bucket across replicas");
    assert!(
        waits.iter().all(|wait| (9..=10).contains(wait)),
        "{waits:?}"
    );
    for server in replicas {
        server.stop().await;
    }
}
