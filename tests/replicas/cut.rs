//! The database dropping at the worst moment: after it received the commit of a claim (an
//! approval, a re-run), before its answer reached the replica. A TCP proxy between the replica
//! and PostgreSQL forwards everything until the statement it waits for and the `COMMIT` that
//! follows it, then answers nothing more, cuts every connection and refuses new ones for a
//! while: the claim is committed, and the replica cannot know it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::*;

/// How long the database stays unreachable after a cut.
const OUTAGE: Duration = Duration::from_millis(1500);
/// How long the server is given to commit what it received before the connections go.
const COMMIT_GRACE: Duration = Duration::from_millis(300);

/// A proxy to PostgreSQL that can cut the database off right after a chosen commit.
struct CuttingProxy {
    addr: SocketAddr,
    inner: Arc<ProxyState>,
    accept: tokio::task::JoinHandle<()>,
}

struct ProxyState {
    upstream: String,
    /// The statement text after which the next `COMMIT` is the cut.
    armed: Mutex<Option<Vec<u8>>>,
    /// Whether new connections are refused now.
    refusing: AtomicBool,
    /// Bumped at each cut: every open connection ends.
    cuts: watch::Sender<u64>,
}

impl CuttingProxy {
    async fn start(upstream: String) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(ProxyState {
            upstream,
            armed: Mutex::new(None),
            refusing: AtomicBool::new(false),
            cuts: watch::Sender::new(0),
        });
        let state = inner.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if state.refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                tokio::spawn(pipe(state.clone(), client));
            }
        });
        CuttingProxy {
            addr,
            inner,
            accept,
        }
    }

    /// Cuts the database off at the first `COMMIT` sent after a statement containing `sql`.
    fn arm(&self, sql: &str) {
        *self.inner.armed.lock().unwrap() = Some(sql.as_bytes().to_vec());
    }

    /// Whether the armed cut has happened.
    fn fired(&self) -> bool {
        self.inner.armed.lock().unwrap().is_none()
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// One client connection, forwarded to PostgreSQL until a cut.
async fn pipe(state: Arc<ProxyState>, mut client: TcpStream) {
    let Ok(mut server) = TcpStream::connect(&state.upstream).await else {
        return;
    };
    let mut cuts = state.cuts.subscribe();
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    // Set once this connection sent the armed statement; then its `COMMIT` is the cut.
    let mut primed = false;
    let mut committing = false;
    let (mut up, mut down) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        tokio::select! {
            read = client_read.read(&mut up), if !committing => {
                let Ok(n @ 1..) = read else { return };
                let chunk = &up[..n];
                {
                    let armed = state.armed.lock().unwrap();
                    if let Some(sql) = armed.as_deref() {
                        primed |= contains(chunk, sql);
                    }
                }
                if server_write.write_all(chunk).await.is_err() {
                    return;
                }
                if primed && contains(chunk, b"COMMIT") {
                    // The commit is on its way; nothing the server says reaches the replica.
                    committing = true;
                    let state = state.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(COMMIT_GRACE).await;
                        state.refusing.store(true, Ordering::SeqCst);
                        *state.armed.lock().unwrap() = None;
                        state.cuts.send_modify(|cuts| *cuts += 1);
                        tokio::time::sleep(OUTAGE).await;
                        state.refusing.store(false, Ordering::SeqCst);
                    });
                }
            }
            read = server_read.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if !committing && client_write.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
            _ = cuts.changed() => return,
        }
    }
}

/// The `host:port` of a `postgres://` URL.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").expect("a URL").1;
    let authority = rest.split('/').next().unwrap();
    authority.rsplit('@').next().unwrap()
}

/// The record of `call_id` once `api` reads one that `done` accepts; the database may be
/// unreachable meanwhile.
async fn record_when(api: &Api, call_id: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(&format!("call {call_id} settled"), DEADLINE, async || {
        let (status, body) = api.get(&format!("/calls/{call_id}")).await;
        (status == StatusCode::OK && done(&body)).then_some(body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_and_a_rerun_committed_unanswered_are_released_and_run_once_when_approved_again()
 {
    let db = TestDb::create().await;
    let upstream = authority(&db.url);
    let proxy = CuttingProxy::start(upstream.to_owned()).await;
    let url = db.url.replacen(upstream, &proxy.addr.to_string(), 1);
    let config_dir = temp_dir();
    let config = config_dir.path().join("toolgate.toml");
    std::fs::write(&config, "[tools.send_email]\nrequire_approval = true\n").unwrap();
    let replicas = start_replicas(&url, 1, &["--config", config.to_str().unwrap()], &[]).await;
    let a = &replicas[0];

    let asked = call(&a.api, "send_email", None, &email("Q3 report"))
        .await
        .unwrap();
    assert_eq!(asked.status, StatusCode::ACCEPTED, "{:?}", asked.body);
    let call_id = asked.body["call_id"].as_str().unwrap().to_owned();
    let token = asked.body["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    // The approval is committed; its answer never arrives.
    proxy.arm("UPDATE suspensions SET status");
    let (status, body) = a.api.approve(&token, json!({"note": "send it"})).await;
    assert!(proxy.fired(), "the proxy cut the approval's commit");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error(&body, "store_unavailable");
    let released = record_when(&a.api, &call_id, |r| r["status"] != "running").await;
    assert_eq!(released["status"], "interrupted", "{released}");
    assert_eq!(
        kinds(&released)[..5],
        [
            "created",
            "suspended",
            "approved",
            "redispatched",
            "interrupted"
        ],
        "{released}"
    );
    assert!(a.outbox().is_empty(), "nothing was sent: {:?}", a.outbox());

    // Approving again claims the released call to run it: that claim is cut the same way.
    proxy.arm("WHERE call_id = $1 AND status = 'interrupted'");
    let (status, body) = a.api.approve(&token, json!({"note": "again"})).await;
    assert!(proxy.fired(), "the proxy cut the re-run's commit");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let released = record_when(&a.api, &call_id, |r| {
        kinds(r).len() > 5 && r["status"] != "running"
    })
    .await;
    assert_eq!(released["status"], "interrupted", "{released}");
    assert_eq!(
        kinds(&released)[5..],
        ["redispatched", "interrupted"],
        "{released}"
    );
    assert!(a.outbox().is_empty(), "nothing was sent: {:?}", a.outbox());

    // With the database back, approving again runs the call, once; nobody was asked twice.
    let (status, body) = a.api.approve(&token, json!({"note": "third"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    let sent = a.outbox();
    assert_eq!(sent.len(), 1, "one email: {sent:?}");
    assert_eq!(sent[0]["subject"], "Q3 report");
    let done = record(&a.api, &call_id).await;
    assert_eq!(kinds(&done)[7..], ["redispatched", "completed"], "{done}");
    let (status, body) = a.api.approve(&token, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(a.outbox().len(), 1);
}
