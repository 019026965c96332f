//! `GET /metrics`: read by a parser of the Prometheus text format (the format's grammar and its
//! rules), its figures moving with what the server does, on both backends; admins only; routes
//! named by their template, never by a path with a token in it.
//!
//! Counters and histograms are the process's, shared by every server a test binary starts, so
//! the tests of this binary take turns ([`TURN`]) and each reads how its own requests moved
//! them. The gauges of what the store holds are read from each server's own store.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Api, Backend, Location, Site, TestServer, eventually};
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::dispatch::{DispatchConfig, ToolSettings};
use toolgate::http::auth::{ApiKey, Role};
use toolgate::{ServerBuilder, ToolSet};

/// One test at a time moves the process's counters.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CALLER: &str = "caller-token-5b1e";
const APPROVER: &str = "approver-token-08c3";
const ADMIN: &str = "admin-token-e7f9";

fn keys() -> Vec<ApiKey> {
    common::api_keys(&[
        ("agent", Role::Caller, CALLER),
        ("ops", Role::Approver, APPROVER),
        ("root", Role::Admin, ADMIN),
    ])
}

async fn server(
    location: &Location,
    configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> TestServer {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    TestServer::start_with(tools, location, |builder| {
        configure(builder.api_keys(keys()))
    })
    .await
}

/// Sends a request with `token`; returns the status and the JSON body.
async fn send(
    api: &Api,
    token: &str,
    post: Option<(&str, Value)>,
    get: &str,
) -> (StatusCode, Value) {
    let request = match post {
        Some((path, body)) => api.client.post(format!("{}{path}", api.base)).json(&body),
        None => api.client.get(format!("{}{get}", api.base)),
    };
    let response = request.bearer_auth(token).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn call(api: &Api, tool: &str, input: Value) -> (StatusCode, Value) {
    let path = format!("/tools/{tool}/call");
    send(api, CALLER, Some((&path, json!({ "input": input }))), "").await
}

async fn decide(api: &Api, token: &str, action: &str, body: Value) -> (StatusCode, Value) {
    let path = format!("/approvals/{token}/{action}");
    send(api, APPROVER, Some((&path, body)), "").await
}

/// One scrape, as Prometheus reads it.
struct Scrape {
    text: String,
    parsed: MetricsExposition<PrometheusType, PrometheusValue>,
}

impl Scrape {
    async fn take(api: &Api) -> Scrape {
        let response = api
            .client
            .get(format!("{}/metrics", api.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        let text = response.text().await.unwrap();
        let parsed = openmetrics_parser::prometheus::parse_prometheus(&text)
            .unwrap_or_else(|err| panic!("not the Prometheus text format: {err:?}\n{text}"));
        Scrape { text, parsed }
    }

    /// The sample of `family` with exactly these labels, if any.
    fn sample(&self, family: &str, labels: &[(&str, &str)]) -> Option<&PrometheusValue> {
        let family = self
            .parsed
            .families
            .get(family)
            .unwrap_or_else(|| panic!("no family {family} in\n{}", self.text));
        family.iter_samples().find_map(|sample| {
            let set = sample.get_labelset().unwrap();
            let names: Vec<&String> = set.iter_names().collect();
            let matches = names.len() == labels.len()
                && labels
                    .iter()
                    .all(|(name, value)| set.get_label_value(name) == Some(*value));
            matches.then_some(&sample.value)
        })
    }

    /// A counter's or a gauge's value; 0 for a counter's series not yet there.
    fn value(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        match self.sample(family, labels) {
            Some(PrometheusValue::Counter(counter)) => counter.value.as_f64(),
            Some(PrometheusValue::Gauge(gauge)) => gauge.as_f64(),
            Some(other) => panic!("{family} is not a counter or a gauge: {other:?}"),
            None => 0.0,
        }
    }

    /// A histogram's count of observations; 0 for a series not yet there.
    fn observed(&self, family: &str, labels: &[(&str, &str)]) -> u64 {
        match self.sample(family, labels) {
            Some(PrometheusValue::Histogram(histogram)) => histogram.count.unwrap_or(0),
            Some(other) => panic!("{family} is not a histogram: {other:?}"),
            None => 0,
        }
    }

    /// The type of `family`.
    fn kind(&self, family: &str) -> &PrometheusType {
        &self
            .parsed
            .families
            .get(family)
            .unwrap_or_else(|| panic!("no family {family} in\n{}", self.text))
            .family_type
    }

    /// Every value of the label `name` across the exposition.
    fn label_values(&self, name: &str) -> Vec<String> {
        let mut values = Vec::new();
        for family in self.parsed.families.values() {
            for sample in family.iter_samples() {
                if let Some(value) = sample.get_labelset().unwrap().get_label_value(name) {
                    values.push(value.to_owned());
                }
            }
        }
        values
    }
}

/// How much each series moved between two scrapes.
struct Moved<'a> {
    before: &'a Scrape,
    after: &'a Scrape,
}

impl Moved<'_> {
    fn by(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        self.after.value(family, labels) - self.before.value(family, labels)
    }

    fn observed(&self, family: &str, labels: &[(&str, &str)]) -> u64 {
        self.after.observed(family, labels) - self.before.observed(family, labels)
    }
}

/// Whether `route` is a route template: each segment a fixed word or a `{parameter}` (this test
/// binary also mounts the router under `/api`).
fn is_template(route: &str) -> bool {
    const WORDS: [&str; 12] = [
        "api",
        "tools",
        "call",
        "calls",
        "resolve",
        "approvals",
        "approve",
        "reject",
        "complete",
        "events",
        "openapi.json",
        "metrics",
    ];
    route.starts_with('/')
        && route.split('/').skip(1).all(|segment| {
            WORDS.contains(&segment) || (segment.starts_with('{') && segment.ends_with('}'))
        })
}

const CALLS: &str = "toolgate_calls_total";
const REQUESTS: &str = "toolgate_http_requests_total";
const CALL_ROUTE: &str = "/tools/{name}/call";

async fn the_metrics_move_with_calls_approvals_and_held_requests(backend: Backend) {
    let _turn = TURN.lock().await;
    let location = Location::new(backend).await;
    let server = server(&location, |builder| builder).await;
    let api = &server.api;
    let before = Scrape::take(api).await;
    // Each tool's outcomes are there from the start, at 0.
    assert!(
        before
            .sample(
                CALLS,
                &[("tool", "send_email"), ("status", "needs_reconciliation")]
            )
            .is_some()
    );
    assert_eq!(before.value("toolgate_approvals_pending", &[]), 0.0);
    match backend {
        Backend::Sqlite => assert!(
            !before
                .parsed
                .families
                .contains_key("toolgate_replicas_live")
        ),
        Backend::Postgres => assert_eq!(before.value("toolgate_replicas_live", &[]), 1.0),
    }

    for text in ["one", "two"] {
        let (status, body) = call(api, "echo", json!({ "text": text })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, asked) = call(api, "ask_human", json!({"question": "Ship it?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    let token = asked["suspension"]["token"].as_str().unwrap().to_owned();
    let call_id = asked["call_id"].as_str().unwrap().to_owned();
    let (status, _) = call(api, "no_such_tool", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(api, APPROVER, None, "/approvals/sus_not_a_token").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let suspended = Scrape::take(api).await;
    let moved = Moved {
        before: &before,
        after: &suspended,
    };
    // Every family that has a series by now, with its type. (Webhook deliveries have none
    // until the first delivery: a family without a series is not rendered.)
    for (family, kind) in [
        (CALLS, PrometheusType::Counter),
        ("toolgate_call_duration_seconds", PrometheusType::Histogram),
        ("toolgate_approvals_pending", PrometheusType::Gauge),
        (
            "toolgate_approval_decision_seconds",
            PrometheusType::Histogram,
        ),
        (REQUESTS, PrometheusType::Counter),
        ("toolgate_store_batch_size", PrometheusType::Histogram),
        ("toolgate_store_commit_seconds", PrometheusType::Histogram),
        ("toolgate_waiters", PrometheusType::Gauge),
    ] {
        assert_eq!(suspended.kind(family), &kind, "{family}");
    }
    assert_eq!(
        moved.by(CALLS, &[("tool", "echo"), ("status", "completed")]),
        2.0
    );
    assert_eq!(
        moved.by(CALLS, &[("tool", "ask_human"), ("status", "suspended")]),
        1.0
    );
    assert_eq!(
        moved.by(CALLS, &[("tool", "ask_human"), ("status", "completed")]),
        0.0
    );
    assert_eq!(
        moved.observed("toolgate_call_duration_seconds", &[("tool", "echo")]),
        2
    );
    assert_eq!(
        moved.observed("toolgate_call_duration_seconds", &[("tool", "ask_human")]),
        1
    );
    assert_eq!(suspended.value("toolgate_approvals_pending", &[]), 1.0);
    assert_eq!(moved.observed("toolgate_approval_decision_seconds", &[]), 0);
    assert_eq!(
        moved.by(REQUESTS, &[("route", CALL_ROUTE), ("status", "200")]),
        2.0
    );
    assert_eq!(
        moved.by(REQUESTS, &[("route", CALL_ROUTE), ("status", "202")]),
        1.0
    );
    assert_eq!(
        moved.by(REQUESTS, &[("route", CALL_ROUTE), ("status", "404")]),
        1.0
    );
    assert_eq!(
        moved.by(
            REQUESTS,
            &[("route", "/approvals/{token}"), ("status", "404")]
        ),
        1.0
    );
    // The suspension was committed by the store's writer: at least one batch, timed.
    assert!(moved.observed("toolgate_store_batch_size", &[]) >= 1);
    assert!(moved.observed("toolgate_store_commit_seconds", &[]) >= 1);

    // A request held on the suspended call is a waiter until the approval answers it.
    let held = {
        let api = api.clone();
        let path = format!("/calls/{call_id}?wait=50");
        tokio::spawn(async move { send(&api, APPROVER, None, &path).await })
    };
    eventually("the held request counted as a waiter", async || {
        let scrape = Scrape::take(api).await;
        (scrape.value("toolgate_waiters", &[]) == 1.0).then_some(())
    })
    .await;
    let (status, done) = decide(api, &token, "approve", json!({"input": {"answer": "yes"}})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let (status, record) = tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the approval answers the held request")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "completed", "{record}");

    // Another suspension, rejected.
    let (status, asked) = call(api, "ask_human", json!({"question": "And this?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    let rejected = asked["suspension"]["token"].as_str().unwrap().to_owned();
    let (status, _) = decide(api, &rejected, "reject", json!({"reason": "Not today."})).await;
    assert_eq!(status, StatusCode::OK);

    let decided = Scrape::take(api).await;
    let moved = Moved {
        before: &suspended,
        after: &decided,
    };
    assert_eq!(decided.value("toolgate_approvals_pending", &[]), 0.0);
    assert_eq!(decided.value("toolgate_waiters", &[]), 0.0);
    assert_eq!(moved.observed("toolgate_approval_decision_seconds", &[]), 2);
    assert_eq!(
        moved.by(CALLS, &[("tool", "ask_human"), ("status", "completed")]),
        1.0
    );
    assert_eq!(
        moved.by(CALLS, &[("tool", "ask_human"), ("status", "suspended")]),
        1.0
    );
    assert_eq!(
        moved.by(CALLS, &[("tool", "ask_human"), ("status", "rejected")]),
        1.0
    );
    // The approved run, timed like any run.
    assert_eq!(
        moved.observed("toolgate_call_duration_seconds", &[("tool", "ask_human")]),
        2
    );
    let approve_route = [("route", "/approvals/{token}/approve"), ("status", "200")];
    assert_eq!(moved.by(REQUESTS, &approve_route), 1.0);
    assert_eq!(
        moved.by(
            REQUESTS,
            &[("route", "/approvals/{token}/reject"), ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        moved.by(
            REQUESTS,
            &[("route", "/calls/{call_id}"), ("status", "200")]
        ),
        1.0
    );

    // Routes are named by template: no token, call id or tool name in a path is ever a label.
    for route in decided.label_values("route") {
        assert!(is_template(&route), "{route}");
    }
    for secret in [
        token.as_str(),
        rejected.as_str(),
        "sus_not_a_token",
        call_id.as_str(),
    ] {
        assert!(
            !decided.text.contains(secret),
            "{secret} in\n{}",
            decided.text
        );
    }
    server.stop().await;
}

async fn an_expiry_is_counted_once_however_often_it_is_found(backend: Backend) {
    let _turn = TURN.lock().await;
    let location = Location::new(backend).await;
    let mut dispatch = DispatchConfig::default();
    dispatch.tools.insert(
        "ask_human".into(),
        ToolSettings {
            approval_ttl: Some(Duration::from_millis(50)),
            ..ToolSettings::default()
        },
    );
    let server = server(&location, |builder| builder.dispatch_config(dispatch)).await;
    let api = &server.api;
    let (status, asked) = call(api, "ask_human", json!({"question": "Quick?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    let token = asked["suspension"]["token"].as_str().unwrap().to_owned();
    let suspended = Scrape::take(api).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Expired, though nobody has written it down yet: not pending.
    let expired = Scrape::take(api).await;
    assert_eq!(expired.value("toolgate_approvals_pending", &[]), 0.0);
    let answer = json!({"input": {"answer": "late"}});
    for (action, body) in [
        ("approve", answer.clone()),
        ("reject", json!({"reason": "late"})),
        ("approve", answer),
        ("complete", json!({"output": {"answer": "late"}})),
    ] {
        let (status, body) = decide(api, &token, action, body).await;
        assert_eq!(status, StatusCode::GONE, "{action}: {body}");
    }
    let after = Scrape::take(api).await;
    let moved = Moved {
        before: &suspended,
        after: &after,
    };
    let expired = [("tool", "ask_human"), ("status", "expired")];
    assert_eq!(moved.by(CALLS, &expired), 1.0);
    assert_eq!(moved.observed("toolgate_approval_decision_seconds", &[]), 0);
    server.stop().await;
}

#[tokio::test]
async fn metrics_are_for_admins_only() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, |builder| builder).await;
    let url = format!("{}/metrics", server.api.base);
    let client = &server.api.client;
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    for token in [CALLER, APPROVER] {
        let response = client.get(&url).bearer_auth(token).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "forbidden");
    }
    let response = client.get(&url).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn a_router_mounted_in_another_app_serves_its_metrics_under_the_prefix() {
    let _turn = TURN.lock().await;
    let location = Location::new(Backend::Sqlite).await;
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let store = common::open_store(&location).await;
    let toolgate = ServerBuilder::with_shared_store(tools, store).build();
    let app = axum::Router::new().nest("/api", toolgate);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = Api::new(listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let (status, _) = api
        .post("/api/tools/echo/call", json!({"input": {"text": "x"}}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let text = api
        .client
        .get(format!("{}/api/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let parsed = openmetrics_parser::prometheus::parse_prometheus(&text).unwrap();
    let requests = &parsed.families[REQUESTS];
    let routes: HashMap<String, f64> = requests
        .iter_samples()
        .filter_map(|sample| {
            let labels = sample.get_labelset().unwrap();
            let route = labels.get_label_value("route")?.to_owned();
            match &sample.value {
                PrometheusValue::Counter(counter) => Some((route, counter.value.as_f64())),
                _ => None,
            }
        })
        .collect();
    assert!(
        routes
            .get("/api/tools/{name}/call")
            .is_some_and(|n| *n >= 1.0),
        "{routes:?}"
    );
    task.abort();
}

/// One series of a scrape, as its text names it: its family (a histogram's `_bucket`, `_sum`
/// and `_count` lines are one series of one family) and its label values in the order written,
/// without a bucket's `le`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Series {
    family: String,
    labels: Vec<(String, String)>,
}

impl Series {
    /// The series of each sample line of `text`, in the order written, each once.
    fn listed(text: &str) -> Vec<Series> {
        let mut families: Vec<(String, String)> = Vec::new();
        let mut series: Vec<Series> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                families.push((name.to_owned(), kind.to_owned()));
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap();
            let name = &line[..name_end];
            let (family, kind) = families.last().unwrap();
            assert!(name.starts_with(family.as_str()), "{line} under {family}");
            if kind == "histogram" {
                let suffix = &name[family.len()..];
                assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}");
            }
            let labels = if line[name_end..].starts_with('{') {
                parse_labels(&line[name_end + 1..])
            } else {
                Vec::new()
            };
            let one = Series {
                family: family.clone(),
                labels: labels
                    .into_iter()
                    .filter(|(name, _)| name != "le")
                    .collect(),
            };
            if series.last() != Some(&one) {
                assert!(
                    !series.contains(&one),
                    "{one:?} is listed in two places in\n{text}"
                );
                series.push(one);
            }
        }
        series
    }
}

/// The `name="value"` pairs of a label set, from after its `{` to its `}`.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.starts_with('}') {
        let (name, after) = rest.split_once("=\"").unwrap();
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().unwrap() {
                (_, '\\') => value.push(chars.next().unwrap().1),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.push((name.to_owned(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    labels
}

/// The order series of one family are listed in: by their label values in the order the
/// label set declares them, a number as a number.
fn label_order(a: &Series, b: &Series) -> std::cmp::Ordering {
    let key = |series: &Series| -> Vec<(u64, String)> {
        series
            .labels
            .iter()
            .map(|(_, value)| (value.parse().unwrap_or(u64::MAX), value.clone()))
            .collect()
    };
    let (a, b) = (key(a), key(b));
    a.iter()
        .zip(&b)
        .map(|((an, a), (bn, b))| {
            if *an != u64::MAX && *bn != u64::MAX {
                an.cmp(bn)
            } else {
                a.cmp(b)
            }
        })
        .find(|order| order.is_ne())
        .unwrap_or(a.len().cmp(&b.len()))
}

#[tokio::test]
async fn every_scrape_lists_the_series_in_one_sorted_order() {
    let _turn = TURN.lock().await;
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, |builder| builder).await;
    let api = &server.api;
    // Traffic that makes series across tools, routes and statuses, in no sorted order.
    let (status, _) = call(api, "send_email", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = call(api, "echo", json!({"text": "a"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = call(api, "zz_no_such_tool", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, asked) = call(api, "ask_human", json!({"question": "Ship it?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    let (status, _) = send(api, "not-a-key", None, "/calls").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let call_id = asked["call_id"].as_str().unwrap();
    let (status, _) = send(api, APPROVER, None, &format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::OK);
    let token = asked["suspension"]["token"].as_str().unwrap();
    let (status, body) = decide(api, token, "reject", json!({"reason": "No."})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A first scrape, so that the scrapes' own series are there in the two compared.
    Scrape::take(api).await;

    let first = Scrape::take(api).await;
    let second = Scrape::take(api).await;
    let (first, second) = (Series::listed(&first.text), Series::listed(&second.text));
    // Other servers of this test binary may add series meanwhile: the series of both scrapes
    // come in one order.
    let common = |of: &[Series], with: &[Series]| -> Vec<Series> {
        of.iter().filter(|s| with.contains(s)).cloned().collect()
    };
    assert_eq!(common(&first, &second), common(&second, &first));
    assert!(first.len() > 40, "{first:?}");

    // Families in the order they are registered (the store's figures last); a family's series
    // sorted by their labels.
    let registered = [
        "toolgate_calls",
        "toolgate_call_duration_seconds",
        "toolgate_approval_decision_seconds",
        "toolgate_http_requests",
        "toolgate_store_batch_size",
        "toolgate_store_commit_seconds",
        "toolgate_webhook_deliveries",
        "toolgate_waiters",
        "toolgate_approvals_pending",
        "toolgate_replicas_live",
    ];
    for scrape in [&first, &second] {
        let mut families: Vec<&str> = scrape.iter().map(|s| s.family.as_str()).collect();
        families.dedup();
        let expected: Vec<&str> = registered
            .iter()
            .map(|name| {
                families
                    .iter()
                    .find(|f| f.strip_suffix("_total").unwrap_or(f) == *name)
                    .copied()
                    .unwrap_or_default()
            })
            .filter(|name| !name.is_empty())
            .collect();
        assert_eq!(families, expected);
        for family in &families {
            let listed: Vec<&Series> = scrape.iter().filter(|s| s.family == *family).collect();
            let mut sorted = listed.clone();
            sorted.sort_by(|a, b| label_order(a, b));
            assert_eq!(listed, sorted, "{family}");
        }
    }
    // The traffic above made several series in each labelled family.
    let tools: Vec<&str> = first
        .iter()
        .filter(|s| s.family == "toolgate_calls_total")
        .map(|s| s.labels[0].1.as_str())
        .collect();
    for tool in ["ask_human", "echo", "send_email"] {
        assert!(tools.contains(&tool), "{tools:?}");
    }
    let statuses: Vec<&str> = first
        .iter()
        .filter(|s| s.family == REQUESTS)
        .map(|s| s.labels[1].1.as_str())
        .collect();
    for status in ["200", "202", "401", "404", "422"] {
        assert!(statuses.contains(&status), "{statuses:?}");
    }
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn the_metrics_move_with_calls_approvals_and_held_requests;
    #[tokio::test] async fn an_expiry_is_counted_once_however_often_it_is_found;
}
