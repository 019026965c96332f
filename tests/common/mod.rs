//! Shared test harness: a toolgate server on 127.0.0.1:0, in this process or as the real binary,
//! on either store backend, and a small JSON client for it.
//!
//! A test whose behaviour depends on the store takes a [`Backend`], keeps its data in a
//! [`Location`] on that backend, and is instantiated once per backend by [`on_each_backend!`].
#![allow(dead_code)] // Each test binary uses a different part of this module.

pub mod attest;
pub mod browser;
pub mod events;
pub mod oidc;
pub mod pg;
pub mod prism;
pub mod providers;
pub mod receiver;
pub mod shapes;
pub mod smtp;
pub mod upstream;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use toolgate::config::ExamplesConfig;
use toolgate::store::{PostgresStore, SqliteStore, Store};
use toolgate::{ServerBuilder, ToolSet};

/// Instantiates each listed test once per backend, as `sqlite::name` and `postgres::name`, so a
/// failure names its backend. A listed test is a function of the crate root taking a
/// [`Backend`]; each entry gives its test attribute and its signature without the argument:
///
/// ```ignore
/// on_each_backend! {
///     #[tokio::test] async fn survives_a_restart;
///     #[test] fn survives_kill_9;
/// }
/// ```
#[macro_export]
macro_rules! on_each_backend {
    (@each $backend:ident;) => {};
    (@each $backend:ident; #[$($attr:tt)*] async fn $name:ident; $($rest:tt)*) => {
        #[$($attr)*]
        async fn $name() {
            super::$name($crate::common::Backend::$backend).await
        }
        $crate::on_each_backend!(@each $backend; $($rest)*);
    };
    (@each $backend:ident; #[$($attr:tt)*] fn $name:ident; $($rest:tt)*) => {
        #[$($attr)*]
        fn $name() {
            super::$name($crate::common::Backend::$backend)
        }
        $crate::on_each_backend!(@each $backend; $($rest)*);
    };
    ($($tests:tt)*) => {
        mod sqlite {
            $crate::on_each_backend!(@each Sqlite; $($tests)*);
        }
        mod postgres {
            $crate::on_each_backend!(@each Postgres; $($tests)*);
        }
    };
}

/// A store backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite file in the data directory.
    Sqlite,
    /// A PostgreSQL database of the test's own (see [`pg`]).
    Postgres,
}

impl Backend {
    /// The record of `call_id`, a call that a process which died left running, once the store
    /// has settled it: SQLite settles such calls as it opens, so this reads it once; on
    /// PostgreSQL a live replica sweeps them when the dead one's lease has run out (see
    /// [`pg::options`]), so this waits until the call is no longer `running`.
    pub async fn recovered(self, api: &Api, call_id: &str) -> Value {
        let path = format!("/calls/{call_id}");
        let read = async || {
            let (status, record) = api.get(&path).await;
            assert_eq!(status, StatusCode::OK, "{record}");
            record
        };
        match self {
            Backend::Sqlite => read().await,
            Backend::Postgres => {
                eventually(
                    &format!("{call_id} settled by the lease sweep"),
                    async || Some(read().await).filter(|record| record["status"] != "running"),
                )
                .await
            }
        }
    }
}

/// Where a server keeps what it records: a data directory (the example tools' outbox, the
/// SQLite file) and, when the store is on PostgreSQL, a database. A bare directory is SQLite
/// in it.
pub trait Site {
    /// The data directory.
    fn data_dir(&self) -> &Path;

    /// The PostgreSQL database holding the store, or `None` for SQLite in the data directory.
    fn database_url(&self) -> Option<&str>;
}

impl Site for Path {
    fn data_dir(&self) -> &Path {
        self
    }

    fn database_url(&self) -> Option<&str> {
        None
    }
}

/// Opens the store at `at`, as the binary would.
pub async fn open_store(at: &(impl Site + ?Sized)) -> Arc<dyn Store> {
    match at.database_url() {
        Some(url) => Arc::new(
            PostgresStore::open(url, pg::options())
                .await
                .expect("store opens"),
        ),
        None => {
            std::fs::create_dir_all(at.data_dir()).unwrap();
            Arc::new(SqliteStore::open(at.data_dir().join("toolgate.db")).expect("store opens"))
        }
    }
}

/// One test's data on one backend: a temporary data directory and, on PostgreSQL, a fresh
/// database. It outlives the servers started on it, so a server started again finds what the
/// last one left; both are removed when it drops.
pub struct Location {
    /// The backend the store is on.
    pub backend: Backend,
    dir: tempfile::TempDir,
    db: Option<pg::TestDb>,
}

impl Site for Location {
    fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn database_url(&self) -> Option<&str> {
        self.db.as_ref().map(|db| db.url.as_str())
    }
}

/// A row of the `calls` table, as the store wrote it.
#[derive(Clone, Debug)]
pub struct StoredCall {
    pub call_id: String,
    pub tool: String,
    pub status: String,
    /// The input JSON, as stored text.
    pub input: String,
}

impl Location {
    pub async fn new(backend: Backend) -> Location {
        let db = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(pg::TestDb::create().await),
        };
        Location {
            backend,
            dir: temp_dir(),
            db,
        }
    }

    /// Every row of `calls`, read behind the servers' backs on a connection of its own: only
    /// what is committed.
    pub async fn stored_calls(&self) -> Vec<StoredCall> {
        const QUERY: &str = "SELECT call_id, tool, status, input FROM calls";
        match self.database_url() {
            Some(url) => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .expect("the test database answers");
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                let rows = client.query(QUERY, &[]).await.expect("calls are read");
                rows.iter()
                    .map(|row| StoredCall {
                        call_id: row.get(0),
                        tool: row.get(1),
                        status: row.get(2),
                        input: row.get(3),
                    })
                    .collect()
            }
            None => {
                // Not created if absent: the server makes the file before it listens.
                let conn = rusqlite::Connection::open_with_flags(
                    self.data_dir().join("toolgate.db"),
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE,
                )
                .expect("the SQLite file opens");
                conn.busy_timeout(Duration::from_secs(5)).unwrap();
                let mut statement = conn.prepare(QUERY).unwrap();
                statement
                    .query_map([], |row| {
                        Ok(StoredCall {
                            call_id: row.get(0)?,
                            tool: row.get(1)?,
                            status: row.get(2)?,
                            input: row.get(3)?,
                        })
                    })
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .expect("calls are read")
            }
        }
    }
}

/// Polls `probe` every 20 ms until it gives a value; fails, naming `what`, after 30 s.
pub async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Installs the TLS crypto provider reqwest needs (toolgate builds it with
/// `rustls-no-provider`), before any client is made.
pub fn tls() {
    toolgate::install_crypto();
}

/// A JSON client bound to one server's base URL.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
}

impl Api {
    pub fn new(addr: SocketAddr) -> Self {
        tls();
        Api {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
        }
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.base["http://".len()..]
            .parse()
            .expect("a socket address")
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

    /// The Prometheus text `/metrics` answers `token`, which must be allowed to read it.
    pub async fn metrics(&self, token: &str) -> String {
        let url = format!("{}/metrics", self.base);
        let response = self.client.get(url).bearer_auth(token).send().await;
        let response = response.expect("request sent");
        assert_eq!(response.status(), StatusCode::OK, "GET /metrics");
        response.text().await.expect("a text body")
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

/// Sends one request as `token` (none when `None`); returns the status, the
/// `WWW-Authenticate` header and the JSON body.
pub async fn send(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, Option<String>, Value) {
    let mut request = api.client.request(method, format!("{}{path}", api.base));
    if let Some(body) = body {
        request = request.json(&body);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, challenge, body)
}

/// One JSON-RPC request to `/mcp` as `token` (2025-11-25, answered in JSON): the HTTP status,
/// `WWW-Authenticate`, and the body (JSON, or the text as a string).
pub async fn mcp_request(
    api: &Api,
    token: &str,
    method: &str,
    params: Value,
) -> (StatusCode, Option<String>, Value) {
    mcp_request_as(api, Some(token), method, params).await
}

/// [`mcp_request`] as `token`, or with no credentials at all when `None` (a server without
/// auth).
pub async fn mcp_request_as(
    api: &Api,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> (StatusCode, Option<String>, Value) {
    let mut request = api
        .client
        .post(format!("{}/mcp", api.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let json_rpc =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = request.json(&json_rpc).send().await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, challenge, body)
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
    pub store: Arc<dyn Store>,
    shutdown: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Serves `tools` with the store at `at`.
    pub async fn start(tools: ToolSet, at: &(impl Site + ?Sized)) -> Self {
        Self::start_with(tools, at, |builder| builder).await
    }

    /// Serves `tools` with the store at `at` and the settings `configure` gives the builder.
    pub async fn start_with(
        tools: ToolSet,
        at: &(impl Site + ?Sized),
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, tools, at, configure).await
    }

    /// As [`TestServer::start_with`], on a listener already bound: for settings that name the
    /// server's own URL (`[auth] resource_url`), which is known only once the port is.
    pub async fn start_on(
        listener: tokio::net::TcpListener,
        tools: ToolSet,
        at: &(impl Site + ?Sized),
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Self {
        let store = open_store(at).await;
        let builder = configure(ServerBuilder::with_shared_store(tools, store.clone()));
        let (router, running) = builder.build_with_running();
        let addr = listener.local_addr().unwrap();
        let (shutdown, signal) = tokio::sync::oneshot::channel();
        let releaser = running.clone();
        let task = tokio::spawn(async move {
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = signal.await;
                // As the binary does: held requests are answered at once.
                releaser.release_held();
            })
            .await
            .unwrap();
            // As the binary does: let running calls be recorded before letting go.
            running.idle().await;
        });
        TestServer {
            api: Api::new(addr),
            store,
            shutdown,
            task,
        }
    }

    /// Serves the example tools with their default settings.
    pub async fn examples(at: &(impl Site + ?Sized)) -> Self {
        Self::examples_with(at, ExamplesConfig::default()).await
    }

    pub async fn examples_with(at: &(impl Site + ?Sized), config: ExamplesConfig) -> Self {
        Self::start(example_tools_with(at, &config), at).await
    }

    /// Stops the server and, as the binary does, closes its store (a replica ends its lease).
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        self.task.await.unwrap();
        self.store.close().await.expect("the store closes cleanly");
    }
}

/// The real `toolgate` binary, started on 127.0.0.1:0.
pub struct Binary {
    pub api: Api,
    child: Child,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Binary {
    /// Starts on the store at `at`, with extra environment variables.
    pub fn start(at: &(impl Site + ?Sized), env: &[(&str, &str)]) -> Self {
        Self::start_with(at, &[], env)
    }

    /// Starts on the store at `at`, with extra `serve` arguments and environment variables.
    pub fn start_with(at: &(impl Site + ?Sized), args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(Command::new(env!("CARGO_BIN_EXE_toolgate")), at, args, env)
    }

    /// Starts as [`Binary::start`] does, with the process's open-file limit at `open_files`
    /// (`ulimit -n` in the shell that execs it).
    pub fn start_with_file_limit(
        at: &(impl Site + ?Sized),
        open_files: u32,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_under_ulimit(at, &format!("-n {open_files}"), env)
    }

    /// [`Binary::start_with_file_limit`], lowering only the soft limit (the hard one stays).
    pub fn start_with_soft_file_limit(
        at: &(impl Site + ?Sized),
        open_files: u32,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_under_ulimit(at, &format!("-S -n {open_files}"), env)
    }

    /// The binary started by a shell that first runs `ulimit {limit}`.
    fn start_under_ulimit(at: &(impl Site + ?Sized), limit: &str, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new("bash");
        command.args([
            "-c",
            &format!("ulimit {limit} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_toolgate"),
        ]);
        Self::spawn(command, at, &[], env)
    }

    fn spawn(
        mut command: Command,
        at: &(impl Site + ?Sized),
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(at.data_dir());
        if let Some(url) = at.database_url() {
            command.args(["--database-url", url]);
        }
        command
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
        if at.database_url().is_some() {
            command.envs(pg::binary_env());
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("the toolgate binary starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    // The text line ends the address with a space, a JSON line with its quote.
                    let addr: String = rest
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '"')
                        .collect();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr);
                    }
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server logs the address it listens on");
        Binary {
            api: Api::new(addr.parse().expect("a socket address")),
            child,
            log,
        }
    }

    /// The lines the server logged so far (it logs at `RUST_LOG=info`).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The server's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
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

/// The example tools with their default settings, their outbox in the data directory of `at`.
pub fn example_tools(at: &(impl Site + ?Sized)) -> ToolSet {
    example_tools_with(at, &ExamplesConfig::default())
}

/// The example tools with `config`, their outbox in the data directory of `at`.
pub fn example_tools_with(at: &(impl Site + ?Sized), config: &ExamplesConfig) -> ToolSet {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, config, at.data_dir()).unwrap();
    tools
}

/// API keys from `(name, role, token)`, configured by their tokens' SHA-256 as the binary does.
pub fn api_keys(
    keys: &[(&str, toolgate::http::auth::Role, &str)],
) -> Vec<toolgate::http::auth::ApiKey> {
    keys.iter()
        .map(|&(name, role, token)| {
            toolgate::http::auth::ApiKey::new(name, role, toolgate::http::auth::token_sha256(token))
        })
        .collect()
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The lines of the example outbox in the data directory of `at`, parsed.
pub fn outbox(at: &(impl Site + ?Sized)) -> Vec<Value> {
    match std::fs::read_to_string(at.data_dir().join("outbox.jsonl")) {
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

/// The Python of the test suite's virtualenv, `.ci/venv` (installed by `.ci/test-deps` from
/// `.ci/requirements.txt`), or the one `TOOLGATE_TEST_PYTHON` names.
pub fn ci_python() -> PathBuf {
    for var in ["TOOLGATE_TEST_PYTHON", "OPENAPI_VALIDATOR_PYTHON"] {
        if let Some(path) = std::env::var_os(var) {
            return path.into();
        }
    }
    let venv = repo_root().join(".ci/venv/bin/python");
    assert!(
        venv.exists(),
        "the test suite's Python packages are not installed: run `bash .ci/test-deps` (or set \
         TOOLGATE_TEST_PYTHON to a python with the packages of .ci/requirements.txt)"
    );
    venv
}

/// Slack message bodies (`chat.postMessage`, `chat.update`) judged by Slack's own SDK
/// (`tests/slack/check_blocks.py`: slack_sdk's Block Kit models); its summary of each (buttons
/// and texts). Fails the test, saying why, on a body the SDK refuses.
pub fn judged_by_slack_sdk(bodies: &[Value]) -> Vec<Value> {
    let dir = temp_dir();
    let path = dir.path().join("bodies.json");
    std::fs::write(&path, serde_json::to_vec(bodies).unwrap()).unwrap();
    let output = Command::new(ci_python())
        .arg(repo_root().join("tests/slack/check_blocks.py"))
        .arg(&path)
        .output()
        .expect("python starts");
    assert!(
        output.status.success(),
        "slack_sdk refuses the blocks: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}
