//! Webhooks (Standard Webhooks v1): what a receiver gets, verified with the published algorithm;
//! retries with one message id; 410 disables; SSRF targets refused; a `kill -9` after the
//! commit still delivers; a replica killed mid-delivery loses nothing.

mod common;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode as AxumStatus};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{Backend, Location, Site, TestServer};
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use toolgate::ToolSet;
use toolgate::config::Config;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// A webhook receiver on 127.0.0.1: records every request and answers from a script (then
/// 200 when the script runs out).
#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(script: &[u16]) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Receiver::serve(listener, script).await
    }

    /// A receiver on `addr`, answering from `script`; 0 in the script holds the request for
    /// 30 s (a receiver that hangs), then answers 200.
    async fn start_on(addr: SocketAddr, script: &[u16]) -> Receiver {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        Receiver::serve(listener, script).await
    }

    async fn serve(listener: tokio::net::TcpListener, script: &[u16]) -> Receiver {
        let got = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
        let (g, s) = (got.clone(), script.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let (got, script) = (g.clone(), s.clone());
                async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned()
                    };
                    got.lock().unwrap().push(Received {
                        id: header("webhook-id"),
                        timestamp: header("webhook-timestamp"),
                        signature: header("webhook-signature"),
                        body,
                    });
                    let status = script.lock().unwrap().pop_front().unwrap_or(200);
                    if status == 0 {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        return AxumStatus::OK;
                    }
                    AxumStatus::from_u16(status).unwrap()
                }
            }),
        );
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { addr, got }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    async fn wait_for(&self, count: usize) -> Vec<Received> {
        common::eventually(&format!("{count} webhook requests"), async || {
            let got = self.got();
            (got.len() >= count).then_some(got)
        })
        .await
    }
}

/// The signature check of the Standard Webhooks specification, written from it here (not
/// toolgate's code): `v1,` base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), the key being
/// the base64-decoded part of the secret after `whsec_`.
fn verifies(secret: &str, got: &Received) -> bool {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", got.id, got.timestamp, got.body).as_bytes());
    let expected = BASE64.encode(mac.finalize().into_bytes());
    got.signature
        .split(' ')
        .any(|sig| sig.strip_prefix("v1,") == Some(expected.as_str()))
}

/// The server's config with one webhook to `receiver`, fast retries.
fn config(receiver: &Receiver, extra: &str) -> Config {
    config_attempts(receiver, extra, 10)
}

fn config_attempts(receiver: &Receiver, extra: &str, attempts: u32) -> Config {
    Config::from_toml(&format!(
        "[[webhooks]]\nurl = \"{}\"\nsecret = \"{SECRET}\"\nallow_private = true\n{extra}\n\
         [webhook_delivery]\ninitial_backoff_ms = 50\nmax_backoff_ms = 200\ntimeout_ms = 2000\n\
         max_attempts = {attempts}\n",
        receiver.url()
    ))
    .unwrap()
}

async fn serve(location: &Location, config: &Config) -> TestServer {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let webhooks = config.webhooks().unwrap();
    TestServer::start_with(tools, location, |b| b.webhooks(webhooks)).await
}

async fn ask(api: &common::Api, question: &str) -> Value {
    let (status, body) = api.call("ask_human", json!({ "question": question })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body
}

async fn every_message_is_signed_as_the_spec_says(backend: Backend) {
    let location = Location::new(backend).await;
    let receiver = Receiver::start(&[]).await;
    let server = serve(&location, &config(&receiver, "")).await;
    let asked = ask(&server.api, "Signed?").await;
    let got = receiver.wait_for(1).await;
    let message = &got[0];
    assert!(message.id.starts_with("msg_"), "{message:?}");
    assert!(
        verifies(SECRET, message),
        "the published algorithm verifies it"
    );
    assert!(
        !verifies("whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXg=", message),
        "a wrong secret does not"
    );
    let body = message.json();
    assert_eq!(body["type"], "call.suspended");
    assert!(body["timestamp"].is_string());
    assert_eq!(body["data"]["call"]["call_id"], asked["call_id"]);
    // The receiver is an approver's system: it gets the token.
    assert_eq!(
        body["data"]["suspension"]["token"],
        asked["suspension"]["token"]
    );
    // The admin sees it delivered (once the answer is recorded).
    let list = common::eventually("the delivery is recorded", async || {
        let (status, list) = server
            .api
            .get("/webhooks/deliveries?status=delivered")
            .await;
        assert_eq!(status, StatusCode::OK);
        (!list["deliveries"][0].is_null()).then_some(list)
    })
    .await;
    assert_eq!(list["deliveries"][0]["webhook"], receiver.url().as_str());
    assert_eq!(list["deliveries"][0]["type"], "call.suspended");
    assert_eq!(list["deliveries"][0]["attempts"], 1);
    server.stop().await;
}

async fn a_receiver_that_fails_three_times_gets_the_message_with_one_id(backend: Backend) {
    let location = Location::new(backend).await;
    let receiver = Receiver::start(&[500, 500, 500]).await;
    let server = serve(
        &location,
        &config(&receiver, "events = [\"call.suspended\"]"),
    )
    .await;
    ask(&server.api, "Retried?").await;
    let got = receiver.wait_for(4).await;
    assert!(
        got.iter().all(|m| m.id == got[0].id),
        "one webhook-id: {got:?}"
    );
    assert!(got.iter().all(|m| verifies(SECRET, m)));
    let list = common::eventually("the delivery is delivered", async || {
        let (_, list) = server.api.get("/webhooks/deliveries").await;
        (list["deliveries"][0]["status"] == "delivered").then_some(list)
    })
    .await;
    assert_eq!(list["deliveries"][0]["attempts"], 4);
    assert_eq!(list["deliveries"][0]["last_status"], 200);
    // Nothing more is sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.got().len(), 4);
    server.stop().await;
}

async fn a_410_disables_the_webhook(backend: Backend) {
    let location = Location::new(backend).await;
    let receiver = Receiver::start(&[410]).await;
    let server = serve(&location, &config(&receiver, "")).await;
    ask(&server.api, "Gone?").await;
    receiver.wait_for(1).await;
    let first = common::eventually("the delivery failed", async || {
        let (_, list) = server.api.get("/webhooks/deliveries?status=failed").await;
        (list["deliveries"].as_array().unwrap().len() == 1).then_some(list)
    })
    .await;
    assert_eq!(first["deliveries"][0]["last_status"], 410);
    // Later messages are not sent to it.
    ask(&server.api, "Still gone?").await;
    common::eventually("the second delivery failed unsent", async || {
        let (_, list) = server.api.get("/webhooks/deliveries?status=failed").await;
        (list["deliveries"].as_array().unwrap().len() == 2).then_some(())
    })
    .await;
    assert_eq!(receiver.got().len(), 1);
    // Only an admin lists or retries deliveries; a delivered one is not sent again.
    let (status, _) = server.api.get("/webhooks/deliveries?status=sideways").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = server
        .api
        .post("/webhooks/deliveries/999999/retry", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.stop().await;
}

async fn a_failed_delivery_is_sent_again_on_an_admins_retry(backend: Backend) {
    let location = Location::new(backend).await;
    let receiver = Receiver::start(&[500, 500]).await;
    let server = serve(&location, &config_attempts(&receiver, "", 2)).await;
    ask(&server.api, "Give up?").await;
    let failed = common::eventually("the delivery gave up", async || {
        let (_, list) = server.api.get("/webhooks/deliveries?status=failed").await;
        list["deliveries"][0]["id"].as_i64()
    })
    .await;
    let (status, retried) = server
        .api
        .post(&format!("/webhooks/deliveries/{failed}/retry"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["status"], "pending");
    let got = receiver.wait_for(3).await;
    assert!(got.iter().all(|m| m.id == got[0].id), "the same message");
    common::eventually("delivered on the retry", async || {
        let (_, list) = server
            .api
            .get("/webhooks/deliveries?status=delivered")
            .await;
        (list["deliveries"].as_array().unwrap().len() == 1).then_some(())
    })
    .await;
    let (status, body) = server
        .api
        .post(&format!("/webhooks/deliveries/{failed}/retry"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    common::assert_error(&body, "not_retryable");
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn every_message_is_signed_as_the_spec_says;
    #[tokio::test] async fn a_receiver_that_fails_three_times_gets_the_message_with_one_id;
    #[tokio::test] async fn a_410_disables_the_webhook;
    #[tokio::test] async fn a_failed_delivery_is_sent_again_on_an_admins_retry;
    #[test] fn a_kill_right_after_the_commit_still_delivers;
}

#[test]
fn ssrf_targets_and_bad_secrets_stop_the_start_naming_the_key() {
    for (toml, key) in [
        (
            "[[webhooks]]\nurl = \"http://127.0.0.1:9/hook\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            "webhooks[0].url",
        ),
        (
            "[[webhooks]]\nurl = \"http://169.254.169.254/latest\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            "webhooks[0].url",
        ),
        (
            "[[webhooks]]\nurl = \"http://[::1]/hook\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            "webhooks[0].url",
        ),
        (
            "[[webhooks]]\nurl = \"https://example.com/hook\"\nsecret = \"not-a-secret\"\n",
            "webhooks[0].secret",
        ),
        (
            "[[webhooks]]\nurl = \"ftp://example.com/hook\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            "webhooks[0].url",
        ),
        (
            "[[webhooks]]\nurl = \"https://example.com/hook\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nevents = [\"call.exploded\"]\n",
            "webhooks[0].events",
        ),
    ] {
        let err = Config::from_toml(toml).unwrap_err();
        assert!(err.to_string().contains(key), "{toml}: {err}");
    }
}

/// Why the webhooks of `toml` do not start: the check of their names at start-up.
async fn start_refused(toml: &str) -> String {
    let config = Config::from_toml(toml).unwrap();
    let webhooks = config.webhooks().unwrap();
    webhooks.check_targets().await.unwrap_err().to_string()
}

#[tokio::test]
async fn a_name_that_resolves_to_a_private_address_is_refused() {
    let err = start_refused(&format!(
        "[[webhooks]]\nurl = \"http://localhost:9/hook\"\nsecret = \"{SECRET}\"\n"
    ))
    .await;
    assert!(err.contains("private"), "{err}");

    // A proxy is where the client connects: its name is checked as a webhook's is.
    let err = start_refused(&format!(
        "[[webhooks]]\nurl = \"https://example.com/hook\"\nsecret = \"{SECRET}\"\n\
         [webhook_delivery]\nproxy = \"http://localhost:3128\"\n"
    ))
    .await;
    assert!(err.contains("proxy") && err.contains("private"), "{err}");
}

/// A config file for the binary with one webhook to `url`.
fn config_file(dir: &std::path::Path, url: &str, timeout_ms: u64) -> std::path::PathBuf {
    let path = dir.join("webhooks.toml");
    std::fs::write(
        &path,
        format!(
            "[[webhooks]]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nallow_private = true\n\
             [webhook_delivery]\ninitial_backoff_ms = 50\nmax_backoff_ms = 300\n\
             timeout_ms = {timeout_ms}\n"
        ),
    )
    .unwrap();
    path
}

/// `kill -9` right after a suspension is committed, before anything could be delivered (the
/// receiver is not even listening yet): after the restart, it is delivered.
fn a_kill_right_after_the_commit_still_delivers(backend: Backend) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = runtime.block_on(Location::new(backend));
    let files = common::temp_dir();
    // A port nobody listens on yet: every attempt before the kill is refused.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = config_file(files.path(), &format!("http://{addr}/hook"), 2000);
    let config = config.to_str().unwrap();
    let server = common::Binary::start_with(&location, &["--config", config], &[]);
    let asked = runtime.block_on(async {
        let (status, body) = server
            .api
            .call("ask_human", json!({"question": "Survive?"}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body
    });
    server.kill();
    let receiver = runtime.block_on(Receiver::start_on(addr, &[]));
    let _server = common::Binary::start_with(&location, &["--config", config], &[]);
    runtime.block_on(async {
        let got = common::eventually("the suspension delivered after the restart", async || {
            receiver
                .got()
                .into_iter()
                .find(|m| m.json()["data"]["call"]["call_id"] == asked["call_id"])
        })
        .await;
        assert!(verifies(SECRET, &got));
        assert_eq!(got.json()["type"], "call.suspended");
    });
}

/// Two replicas: the one sending a delivery is killed while the receiver holds the request; the
/// other sends it once the claim's lease runs out, with the same message id.
#[test]
fn a_replica_killed_mid_delivery_does_not_lose_the_message() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = runtime.block_on(Location::new(Backend::Postgres));
    let files = common::temp_dir();
    // The first request hangs; the next is answered 200.
    let receiver = runtime.block_on(Receiver::start(&[0]));
    let config = config_file(files.path(), &receiver.url(), 1000);
    let config = config.to_str().unwrap();
    let a = common::Binary::start_with(&location, &["--config", config], &[]);
    let asked = runtime.block_on(async {
        let (status, body) = a
            .api
            .call("ask_human", json!({"question": "Mid-delivery?"}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body
    });
    // A is sending it, held by the receiver: kill it there.
    let first = runtime.block_on(receiver.wait_for(1))[0].clone();
    a.kill();
    let b = common::Binary::start_with(&location, &["--config", config], &[]);
    runtime.block_on(async {
        let got = receiver.wait_for(2).await;
        assert_eq!(got[1].id, first.id, "the same message");
        assert_eq!(got[1].json()["data"]["call"]["call_id"], asked["call_id"]);
        assert!(verifies(SECRET, &got[1]));
        common::eventually("B records it delivered", async || {
            let (_, list) = b.api.get("/webhooks/deliveries?status=delivered").await;
            (list["deliveries"].as_array().unwrap().len() == 1).then_some(())
        })
        .await;
    });
}

/// A listener standing in for an HTTP proxy: records the request line of every connection
/// and answers 200, as a proxy that forwarded the request would.
struct Proxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    async fn start() -> Proxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut head = vec![0; 4096];
                    let read = socket.read(&mut head).await.unwrap_or(0);
                    let line = String::from_utf8_lossy(&head[..read]);
                    let line = line.lines().next().unwrap_or("(nothing)").to_owned();
                    kept.lock().unwrap().push(line);
                    let _ = socket
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        Proxy { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// The proxy variables of the environment are not the webhooks' business: a server started
/// with every one of them pointing at a proxy posts straight to the receiver.
#[test]
fn the_environments_proxy_is_not_used() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = runtime.block_on(Location::new(Backend::Sqlite));
    let files = common::temp_dir();
    let receiver = runtime.block_on(Receiver::start(&[]));
    let proxy = runtime.block_on(Proxy::start());
    let config = config_file(files.path(), &receiver.url(), 2000);
    let proxy_url = proxy.url();
    let mut env = vec![("NO_PROXY", ""), ("no_proxy", "")];
    for name in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        env.push((name, proxy_url.as_str()));
    }
    let server =
        common::Binary::start_with(&location, &["--config", config.to_str().unwrap()], &env);
    runtime.block_on(async {
        ask(&server.api, "Direct?").await;
        common::eventually(
            "the message reaches the receiver or the proxy",
            async || (!receiver.got().is_empty() || !proxy.seen().is_empty()).then_some(()),
        )
        .await;
    });
    assert_eq!(proxy.seen(), Vec::<String>::new(), "the proxy saw nothing");
    assert_eq!(
        receiver.got().len(),
        1,
        "the receiver got the message directly"
    );
}

/// A proxy set in `[webhook_delivery] proxy` is the way out, for a webhook allowed to use it.
#[tokio::test]
async fn a_configured_proxy_carries_the_webhooks() {
    let location = Location::new(Backend::Sqlite).await;
    let receiver = Receiver::start(&[]).await;
    let proxy = Proxy::start().await;
    let config = Config::from_toml(&format!(
        "[[webhooks]]\nurl = \"{}\"\nsecret = \"{SECRET}\"\nallow_private = true\n\
         [webhook_delivery]\nproxy = \"{}\"\ntimeout_ms = 2000\n",
        receiver.url(),
        proxy.url()
    ))
    .unwrap();
    let server = serve(&location, &config).await;
    ask(&server.api, "Through the proxy?").await;
    let seen =
        common::eventually("the proxy is asked", async || proxy.seen().first().cloned()).await;
    assert_eq!(seen, format!("POST {} HTTP/1.1", receiver.url()));
    assert!(
        receiver.got().is_empty(),
        "the receiver is reached only through the proxy"
    );
    server.stop().await;
}

/// A webhook's URL is logged as scheme, host and port: its path and query, where a Slack-style
/// receiver keeps its secret, never reach the log.
#[test]
fn the_log_names_a_webhook_without_its_path() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = runtime.block_on(Location::new(Backend::Sqlite));
    let files = common::temp_dir();
    // 410 Gone: the server logs that it disables the webhook, naming it.
    let receiver = runtime.block_on(Receiver::start(&[410]));
    let url = format!("{}?token=HOOK-SECRET", receiver.url());
    let config = config_file(files.path(), &url, 2000);
    let server =
        common::Binary::start_with(&location, &["--config", config.to_str().unwrap()], &[]);
    runtime.block_on(async {
        ask(&server.api, "Logged?").await;
        common::eventually("the 410 is logged", async || {
            server
                .log()
                .into_iter()
                .find(|line| line.contains("410 Gone"))
        })
        .await;
    });
    let log = server.log().join("\n");
    assert!(log.contains(&format!("http://{}", receiver.addr)), "{log}");
    assert!(!log.contains("HOOK-SECRET"), "{log}");
}
