//! Notifications per second from the outbox, beside webhook deliveries in the same run.
//!
//! `toolgate-bench notifications [CALLS] [ROUNDS]` (`bash bench/notify`): a receiver inside the
//! harness stands in for both Slack's Web API (`POST /api/chat.postMessage` answers as Slack
//! does: `{"ok": true, "channel", "ts"}`) and a webhook's receiver (`POST /hook`, `200`). Each
//! round, in turn:
//! - `webhooks` (the baseline): a fresh toolgate on SQLite with one webhook to the receiver for
//!   `call.suspended` only; CALLS calls suspend (`ask_human`), each one delivery.
//! - `notifications`: a fresh toolgate with one `[[notify]]` Slack channel (one person who may
//!   decide, reached by a direct message); the same CALLS calls, each one `chat.postMessage`
//!   carrying the Block Kit message.
//!
//! Each is timed from the first call's `202` to the last arrival; the rate is arrivals per
//! second of that time. Both go through the same outbox and sender, so the ratio is what a
//! notification costs beyond a webhook: the recipients, the message, the larger body.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;

use crate::harness::client::suspend_many;
use crate::harness::servers::sqlite_server;
use crate::harness::webhook::SECRET;
use crate::harness::{BareMode, Options, WaitOptions};

/// The bot token and signing secret the channel reads from its variables.
const TOKEN: &str = "xoxb-bench";

/// What the receiver has counted, by door.
#[derive(Default)]
struct Counts {
    posts: AtomicU64,
    hooks: AtomicU64,
    bytes: AtomicU64,
    last: std::sync::Mutex<Option<Instant>>,
}

impl Counts {
    fn arrived(&self, body: &Bytes, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn reset(&self) {
        for counter in [&self.posts, &self.hooks, &self.bytes] {
            counter.store(0, Ordering::Relaxed);
        }
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

async fn post_message(
    State(counts): State<Arc<Counts>>,
    body: Bytes,
) -> axum::Json<serde_json::Value> {
    counts.arrived(&body, &counts.posts);
    let n = counts.posts.load(Ordering::Relaxed);
    axum::Json(
        serde_json::json!({"ok": true, "channel": "D0BENCH", "ts": format!("1700000000.{n:06}")}),
    )
}

async fn hook(State(counts): State<Arc<Counts>>, body: Bytes) -> &'static str {
    counts.arrived(&body, &counts.hooks);
    ""
}

/// One measured run: arrivals per second, and the average body.
struct Measured {
    rate: f64,
    bytes: u64,
    missing: u64,
}

async fn measure(
    options: &Options,
    label: &str,
    config: &Path,
    counts: &Counts,
    counter: fn(&Counts) -> &AtomicU64,
    calls: usize,
) -> Result<Measured, String> {
    counts.reset();
    let env = [
        ("SLACK_BENCH_TOKEN".to_owned(), TOKEN.to_owned()),
        ("SLACK_BENCH_SECRET".to_owned(), "bench-secret".to_owned()),
    ];
    let server = sqlite_server(options, label, Some(config), &env).await?;
    let (made, _failures) = suspend_many(server.addr, calls, options.connections).await?;
    let first = made
        .iter()
        .map(|(_, at)| *at)
        .min()
        .ok_or("no call suspended")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (counter(counts).load(Ordering::Relaxed) as usize) < made.len()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let arrived = counter(counts).load(Ordering::Relaxed);
    let last = counts
        .last
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(first);
    let secs = last
        .saturating_duration_since(first)
        .as_secs_f64()
        .max(1e-9);
    drop(server);
    Ok(Measured {
        rate: arrived as f64 / secs,
        bytes: counts.bytes.load(Ordering::Relaxed) / arrived.max(1),
        missing: (made.len() as u64).saturating_sub(arrived),
    })
}

/// Runs `rounds` rounds of both scenarios with `calls` calls each and prints the best round of
/// each, with the ratio.
pub async fn run(
    toolgate: PathBuf,
    data_root: PathBuf,
    calls: usize,
    rounds: usize,
) -> Result<(), String> {
    let counts = Arc::new(Counts::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    let router = axum::Router::new()
        .route("/api/chat.postMessage", post(post_message))
        .route("/hook", post(hook))
        .with_state(counts.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    std::fs::create_dir_all(&data_root).map_err(|e| format!("{}: {e}", data_root.display()))?;
    let webhook = data_root.join("notifications-webhook.toml");
    let slack = data_root.join("notifications-slack.toml");
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write(
        &webhook,
        format!(
            "[[webhooks]]\nurl = \"http://{addr}/hook\"\nsecret = \"{SECRET}\"\nallow_private = true\n\
             events = [\"call.suspended\"]\n"
        ),
    )?;
    write(
        &slack,
        format!(
            "[[people]]\nname = \"alice\"\nslack_user = \"U0ALICE\"\n\n[[notify]]\nname = \"bench\"\n\
             kind = \"slack\"\nbot_token_env = \"SLACK_BENCH_TOKEN\"\n\
             signing_secret_env = \"SLACK_BENCH_SECRET\"\napi_url = \"http://{addr}/api\"\n"
        ),
    )?;
    let options = Options {
        toolgate,
        bare: BareMode::Process(PathBuf::new()),
        data_root,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        rounds,
        connections: 32,
        peer: false,
        scale: None,
        startups: 0,
        postgres: None,
        waiting: WaitOptions::full(),
    };
    let (mut best_hooks, mut best_posts) = (None::<Measured>, None::<Measured>);
    for round in 1..=rounds {
        let hooks = measure(
            &options,
            "notifications-webhooks",
            &webhook,
            &counts,
            |c| &c.hooks,
            calls,
        )
        .await?;
        let posts = measure(
            &options,
            "notifications-slack",
            &slack,
            &counts,
            |c| &c.posts,
            calls,
        )
        .await?;
        eprintln!(
            "round {round}: webhooks {:.0}/s ({} B each, {} missing); notifications {:.0}/s ({} B each, {} missing)",
            hooks.rate, hooks.bytes, hooks.missing, posts.rate, posts.bytes, posts.missing
        );
        if best_hooks.as_ref().is_none_or(|b| hooks.rate > b.rate) {
            best_hooks = Some(hooks);
        }
        if best_posts.as_ref().is_none_or(|b| posts.rate > b.rate) {
            best_posts = Some(posts);
        }
    }
    task.abort();
    let (hooks, posts) = (best_hooks.ok_or("no round")?, best_posts.ok_or("no round")?);
    println!(
        "| notifications (Slack chat.postMessage) from the outbox, {calls} calls, best of {rounds} | \
         {:.0}/s | webhooks {:.0}/s | {:.2}x |",
        posts.rate,
        hooks.rate,
        posts.rate / hooks.rate.max(1e-9)
    );
    if hooks.missing + posts.missing > 0 {
        return Err(format!(
            "{} webhooks and {} notifications never arrived",
            hooks.missing, posts.missing
        ));
    }
    Ok(())
}
