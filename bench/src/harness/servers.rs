//! The servers under load: toolgate as a child process (and a fresh one on SQLite), the bare
//! axum ceiling, their memory, and seeding a store for the scale scenarios.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::http::header;
use axum::response::IntoResponse;
use bytes::Bytes;
use serde_json::{Value, json};

use super::client::fetch;
use super::{BareMode, Options};

/// A server running as a child process.
pub struct ServerProcess {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `toolgate serve` on `data_dir` and waits until `/readyz` answers 200.
    pub async fn toolgate(binary: &Path, data_dir: &Path) -> Result<Self, String> {
        Self::toolgate_with(binary, data_dir, None, &[]).await
    }

    /// Starts `toolgate serve` on `data_dir` with the config file `config` if given (webhooks,
    /// which have no environment form) and `env` (such as `TOOLGATE_STORE__DATABASE_URL`, which
    /// keeps a password off the command line), and waits until `/readyz` answers 200.
    pub async fn toolgate_with(
        binary: &Path,
        data_dir: &Path,
        config: Option<&Path>,
        env: &[(String, String)],
    ) -> Result<Self, String> {
        Self::toolgate_in(Command::new(binary), data_dir, config, env).await
    }

    /// As [`ServerProcess::toolgate_with`], run by `command`: the binary itself, or a program
    /// that runs it (`valgrind --tool=callgrind .../toolgate`); `serve` and its arguments are
    /// appended.
    pub async fn toolgate_in(
        mut command: Command,
        data_dir: &Path,
        config: Option<&Path>,
        env: &[(String, String)],
    ) -> Result<Self, String> {
        // toolgate reads every TOOLGATE_* variable as configuration (and refuses one it does not
        // know, such as the tests' TOOLGATE_TEST_DATABASE_URL): the server measured runs on its
        // defaults and what the harness sets, whatever the harness's own environment holds.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TOOLGATE_") {
                command.env_remove(key);
            }
        }
        // What a comparison run sets on every server it starts (a quota, say):
        // `BENCH_SERVER_ENV='TOOLGATE_QUOTAS__CALLS_PER_MINUTE=1000000000;NAME=VALUE'`.
        if let Ok(extra) = std::env::var("BENCH_SERVER_ENV") {
            for pair in extra.split(';').filter(|pair| !pair.trim().is_empty()) {
                if let Some((key, value)) = pair.split_once('=') {
                    command.env(key.trim(), value);
                }
            }
        }
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let mut child = command
            .env("RUST_LOG", "warn,toolgate=info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        let addr = listening_addr(&mut child, "listening on http://")?;
        let server = ServerProcess { child, addr };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if fetch(self.addr, "/readyz").await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Err("toolgate never became ready".into())
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory now, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid())
    }

    /// Its peak resident memory, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        peak_rss_kib(self.pid())
    }

    /// SIGKILL (`kill -9`), and wait for it to be gone.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for it to exit.
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = self.child.kill();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads the child's stderr until a line carries `marker` followed by an address; keeps
/// draining it afterwards so the child never blocks on a full pipe.
fn listening_addr(child: &mut Child, marker: &'static str) -> Result<SocketAddr, String> {
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut said = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split(marker).nth(1) {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                if let Some(tx) = tx.take() {
                    let _ = tx.send(Ok(addr));
                }
            } else if tx.is_some() {
                if line.contains("ERROR") {
                    eprintln!("{line}");
                }
                said.push(line);
            }
        }
        // It exited before it listened: what it said is why.
        if let Some(tx) = tx {
            let _ = tx.send(Err(said.join("\n")));
        }
    });
    let addr = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Ok(addr)) => addr,
        Ok(Err(said)) => return Err(format!("the server exited before it listened: {said}")),
        Err(_) => return Err("the server never said where it listens".to_owned()),
    };
    addr.parse().map_err(|e| format!("bad address {addr}: {e}"))
}

/// The bare axum ceiling: the same `/tools` bytes, and an echo route that parses the call
/// envelope and answers a completed call, with nothing of toolgate's in between.
pub enum BareServer {
    /// A child process.
    Process(ServerProcess),
    /// A task of the harness.
    InProcess(SocketAddr, tokio::task::JoinHandle<()>),
}

impl BareServer {
    /// Starts the bare server serving `tools_json` at `/tools`, recording its recorded echo
    /// route's calls in the SQLite file `db`.
    pub async fn start(mode: &BareMode, tools_json: Bytes, db: &Path) -> Result<Self, String> {
        match mode {
            BareMode::InProcess => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| e.to_string())?;
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                let recorder = Recorder::start(db.to_path_buf())?;
                let task = tokio::spawn(async move {
                    let _ = axum::serve(listener, bare_router(tools_json, recorder)).await;
                });
                Ok(BareServer::InProcess(addr, task))
            }
            BareMode::Process(exe) => {
                let file = std::env::temp_dir()
                    .join(format!("toolgate-bench-tools-{}.json", std::process::id()));
                std::fs::write(&file, &tools_json).map_err(|e| e.to_string())?;
                let mut child = Command::new(exe)
                    .arg("bare-server")
                    .arg(&file)
                    .arg(db)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start the bare server: {e}"))?;
                let addr = listening_addr(&mut child, "bare listening on http://")?;
                Ok(BareServer::Process(ServerProcess { child, addr }))
            }
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        match self {
            BareServer::Process(p) => p.addr,
            BareServer::InProcess(addr, _) => *addr,
        }
    }

    /// Its process id, when it has its own.
    pub fn pid(&self) -> Option<u32> {
        match self {
            BareServer::Process(p) => Some(p.pid()),
            BareServer::InProcess(..) => None,
        }
    }

    /// Its peak resident memory, when it has its own process.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.pid().and_then(peak_rss_kib)
    }
}

impl Drop for BareServer {
    fn drop(&mut self) {
        if let BareServer::InProcess(_, task) = self {
            task.abort();
        }
    }
}

/// The least a durable record of each call can cost in SQLite: a row of the call id, its input
/// and its output, inserted behind the answer by one thread that commits whatever has gathered
/// every 10 ms, in WAL mode with `synchronous = FULL`. No validation, no events, one index.
/// This is the floor of any server that records every call in SQLite, toolgate included.
pub struct Recorder {
    pending: Mutex<Vec<(String, String)>>,
}

impl Recorder {
    /// Opens (creating) `db` and starts the committing thread.
    pub fn start(db: PathBuf) -> Result<Arc<Recorder>, String> {
        let conn = rusqlite::Connection::open(&db).map_err(|e| e.to_string())?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
             CREATE TABLE IF NOT EXISTS calls (call_id TEXT PRIMARY KEY NOT NULL, \
             input TEXT NOT NULL, output TEXT NOT NULL) STRICT;",
        )
        .map_err(|e| e.to_string())?;
        let recorder = Arc::new(Recorder {
            pending: Mutex::new(Vec::new()),
        });
        let shared = recorder.clone();
        std::thread::Builder::new()
            .name("bare-recorder".into())
            .spawn(move || {
                let mut conn = conn;
                loop {
                    std::thread::sleep(Duration::from_millis(10));
                    let rows = std::mem::take(&mut *shared.pending.lock().expect("recorder"));
                    if rows.is_empty() {
                        continue;
                    }
                    let tx = conn.transaction().expect("a transaction");
                    {
                        let mut insert = tx
                            .prepare_cached("INSERT INTO calls VALUES (?1, ?2, ?3)")
                            .expect("the insert");
                        for (call_id, json) in &rows {
                            insert.execute([call_id, json, json]).expect("a row");
                        }
                    }
                    tx.commit().expect("a commit");
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(recorder)
    }
}

/// The bare ceiling's routes; `/recorded/tools/echo/call` also records each call with
/// `recorder`.
pub fn bare_router(tools_json: Bytes, recorder: Arc<Recorder>) -> axum::Router {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct CallRequest {
        input: Value,
    }
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let recorded_counter = counter.clone();
    axum::Router::new()
        .route(
            "/tools",
            axum::routing::get(move || {
                let bytes = tools_json.clone();
                async move { ([(header::CONTENT_TYPE, "application/json")], bytes) }
            }),
        )
        .route(
            "/tools/echo/call",
            axum::routing::post(move |Json(request): Json<CallRequest>| {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async move {
                    Json(json!({
                        "call_id": format!("call_{n:032x}"),
                        "tool": "echo",
                        "status": "completed",
                        "output": request.input,
                    }))
                    .into_response()
                }
            }),
        )
        .route(
            "/recorded/tools/echo/call",
            axum::routing::post(move |Json(request): Json<CallRequest>| {
                let n = recorded_counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let call_id = format!("call_{n:032x}");
                let json = request.input.to_string();
                recorder
                    .pending
                    .lock()
                    .expect("recorder")
                    .push((call_id.clone(), json));
                async move {
                    Json(json!({
                        "call_id": call_id,
                        "tool": "echo",
                        "status": "completed",
                        "output": request.input,
                    }))
                    .into_response()
                }
            }),
        )
}

/// Serves the bare ceiling on 127.0.0.1 until killed (the `bare-server` subcommand).
pub async fn run_bare(tools_json: Bytes, db: PathBuf) -> std::io::Result<()> {
    let recorder = Recorder::start(db).map_err(std::io::Error::other)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    eprintln!("bare listening on http://{}", listener.local_addr()?);
    axum::serve(listener, bare_router(tools_json, recorder)).await
}

/// Fills the store in `dir` with `calls` finished echo calls (and their events) and `pending`
/// suspended `ask_human` calls, as toolgate itself would have recorded them.
pub fn seed(dir: &Path, calls: u64, pending: u64) -> Result<(), String> {
    let db = dir.join("toolgate.db");
    // toolgate creates the schema; the rows go in directly, which is much faster than calls.
    drop(toolgate::store::SqliteStore::open(&db).map_err(|e| e.to_string())?);
    let mut conn = rusqlite::Connection::open(&db).map_err(|e| e.to_string())?;
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    let base: i64 = 1_700_000_000_000;
    tx.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO calls (call_id, tool, effect, status, input, output, attempts, created_at, \
         updated_at, events) SELECT printf('call_seed_%012d', i), 'echo', 'read', 'completed', \
         '{\"text\":\"seed\"}', '{\"text\":\"seed\"}', 1, ?2 + i, ?2 + i, \
         printf('[{\"at\":%d,\"kind\":\"created\"},{\"at\":%d,\"kind\":\"completed\",\
         \"details\":{\"attempts\":1}}]', ?2 + i, ?2 + i) FROM n",
        rusqlite::params![calls as i64, base],
    )
    .map_err(|e| e.to_string())?;
    tx.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO calls (call_id, tool, effect, status, input, attempts, created_at, \
         updated_at, events) SELECT printf('call_pend_%012d', i), 'ask_human', 'read', \
         'suspended', '{\"question\":\"seeded?\"}', 1, ?2 + i, ?2 + i, \
         printf('[{\"at\":%d,\"kind\":\"created\"},{\"at\":%d,\"kind\":\"suspended\"}]', \
         ?2 + i, ?2 + i) FROM n",
        rusqlite::params![pending as i64, base],
    )
    .map_err(|e| e.to_string())?;
    tx.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO suspensions (token, call_id, tool, reason, input_schema, status, \
         created_at) \
         SELECT printf('sus_seed_%012d', i), printf('call_pend_%012d', i), 'ask_human', 'seeded?', \
         '{\"type\":\"object\",\"required\":[\"answer\"],\"properties\":{\"answer\":{\"type\":\"string\"}}}', \
         'pending', ?2 + i FROM n",
        rusqlite::params![pending as i64, base],
    )
    .map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); ANALYZE;")
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Peak resident memory of process `pid`, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM:")
}

/// Resident memory of process `pid` now, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:")
}

/// Anonymous resident memory of process `pid` now (the heap and stacks, not the mapped binary),
/// in KiB.
pub fn anon_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "RssAnon:")
}

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|line| line.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A fresh toolgate on SQLite in `options.data_root/<label>`, with `env`.
pub(crate) async fn sqlite_server(
    options: &Options,
    label: &str,
    config: Option<&std::path::Path>,
    env: &[(String, String)],
) -> Result<ServerProcess, String> {
    let dir = options.data_root.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    ServerProcess::toolgate_with(&options.toolgate, &dir, config, env).await
}
