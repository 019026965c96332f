//! Shared test harness: a toolgate server on 127.0.0.1:0, in this process or as the real binary,
//! and a small JSON client for it.
#![allow(dead_code)] // Each test binary uses a different part of this module.

pub mod pg;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use toolgate::config::ExamplesConfig;
use toolgate::store::SqliteStore;
use toolgate::{ServerBuilder, ToolSet};

/// A JSON client bound to one server's base URL.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
}

impl Api {
    pub fn new(addr: SocketAddr) -> Self {
        Api {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
        }
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request sent");
        read(response).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("request sent");
        read(response).await
    }

    /// Calls `tool` with an `Idempotency-Key` header; returns the status, the
    /// `Idempotent-Replayed` and `Retry-After` headers, and the body.
    pub async fn call_keyed(
        &self,
        tool: &str,
        key: &str,
        input: Value,
    ) -> (StatusCode, Option<String>, Option<String>, Value) {
        let response = self
            .client
            .post(format!("{}/tools/{tool}/call", self.base))
            .header("idempotency-key", key)
            .json(&serde_json::json!({ "input": input }))
            .send()
            .await
            .expect("request sent");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (replayed, retry_after) = (header("idempotent-replayed"), header("retry-after"));
        let (status, body) = read(response).await;
        (status, replayed, retry_after, body)
    }

    /// Posts JSON with extra headers.
    pub async fn post_raw_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Value,
    ) -> (StatusCode, Value) {
        let mut request = self.client.post(format!("{}{path}", self.base)).json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        read(request.send().await.expect("request sent")).await
    }

    /// Posts raw bytes with an optional content type.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        let mut request = self.client.post(format!("{}{path}", self.base)).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        read(request.send().await.expect("request sent")).await
    }

    pub async fn call(&self, tool: &str, input: Value) -> (StatusCode, Value) {
        self.post(
            &format!("/tools/{tool}/call"),
            serde_json::json!({ "input": input }),
        )
        .await
    }

    pub async fn approve(&self, token: &str, input: Value) -> (StatusCode, Value) {
        self.post(
            &format!("/approvals/{token}/approve"),
            serde_json::json!({ "input": input }),
        )
        .await
    }
}

async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = response.bytes().await.expect("body read");
    assert_eq!(
        content_type,
        "application/json",
        "every answer is JSON; got {status} {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let body = serde_json::from_slice(&bytes).expect("body is JSON");
    (status, body)
}

/// Asserts `body` is the error envelope with `code`, and returns its `details`.
#[track_caller]
pub fn assert_error(body: &Value, code: &str) -> Value {
    let error = body
        .get("error")
        .unwrap_or_else(|| panic!("no error envelope in {body}"));
    assert_eq!(error["code"], code, "in {body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "an error has a message: {body}"
    );
    error.get("details").cloned().unwrap_or(Value::Null)
}

/// A server running inside this test process.
pub struct TestServer {
    pub api: Api,
    shutdown: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Serves `tools` with a SQLite store in `data_dir`.
    pub async fn start(tools: ToolSet, data_dir: &Path) -> Self {
        std::fs::create_dir_all(data_dir).unwrap();
        let store = SqliteStore::open(data_dir.join("toolgate.db")).expect("store opens");
        Self::serve(ServerBuilder::new(tools, store)).await
    }

    /// Serves what `builder` builds.
    pub async fn serve(builder: ServerBuilder) -> Self {
        let (router, running) = builder.build_with_running();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, signal) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = signal.await;
                })
                .await
                .unwrap();
            // As the binary does: let running calls be recorded before letting go.
            running.idle().await;
        });
        TestServer {
            api: Api::new(addr),
            shutdown,
            task,
        }
    }

    /// Serves the example tools with their default settings.
    pub async fn examples(data_dir: &Path) -> Self {
        Self::examples_with(data_dir, ExamplesConfig::default()).await
    }

    pub async fn examples_with(data_dir: &Path, config: ExamplesConfig) -> Self {
        let mut tools = ToolSet::new();
        toolgate::examples::register(&mut tools, &config, data_dir).unwrap();
        Self::start(tools, data_dir).await
    }

    /// Stops the server and waits until it has let go of everything.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        self.task.await.unwrap();
    }
}

/// The real `toolgate` binary, started on 127.0.0.1:0.
pub struct Binary {
    pub api: Api,
    child: Child,
}

impl Binary {
    pub fn start(data_dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_with(data_dir, &[], env)
    }

    /// Starts with extra `serve` arguments and environment variables.
    pub fn start_with(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Hermetic: only the configuration the test gives reaches the server.
        for (key, _) in std::env::vars() {
            if key.starts_with("TOOLGATE_") {
                command.env_remove(key);
            }
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("the toolgate binary starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr);
                    }
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server logs the address it listens on");
        Binary {
            api: Api::new(addr.parse().expect("a socket address")),
            child,
        }
    }

    /// `kill -9`: no shutdown, no flush, nothing.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then waits for the exit; returns whether it exited successfully.
    pub fn terminate(mut self) -> bool {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(
                Instant::now() < deadline,
                "the server did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The lines of the example outbox in `data_dir`, parsed.
pub fn outbox(data_dir: &Path) -> Vec<Value> {
    match std::fs::read_to_string(data_dir.join("outbox.jsonl")) {
        Ok(text) => text
            .lines()
            .map(|line| serde_json::from_str(line).expect("an outbox line is JSON"))
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => panic!("cannot read the outbox: {err}"),
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
