//! One upstream MCP server's connection, and the task that keeps it up.
//!
//! A [`Link`] holds the current session, if there is one: calls take its peer, and find out at
//! once when there is none (the tool answers `503 upstream_unavailable` before anything is
//! recorded). The supervisor ([`Link::supervise`]) owns the session: it re-reads the tool list
//! on `notifications/tools/list_changed` (and every `refresh_s`), and when the session ends (a
//! stdio server that exited, an HTTP server a call found unreachable) it logs why, and connects
//! again with a growing wait; each new session re-reads the list.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, Tool as McpTool};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::Notify;

use super::config::{Transport, Upstream};

/// The longest wait between two attempts to reach a server that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The first wait after a session ends.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// A session that lasted this long was healthy: the next wait starts again from the first. One
/// that ended sooner (a server that crashes as it starts) makes the wait grow.
const HEALTHY_SESSION: Duration = Duration::from_secs(10);
/// How long connecting (spawning, or reaching the URL, and the `initialize` handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The least time between two readings of a session's tool list.
const RELIST_PAUSE: Duration = Duration::from_millis(250);
/// How long reading the tool list may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest JSON answer read from an HTTP upstream (a tool's result, its tool list).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// What a stdio server inherits of toolgate's environment; everything else it is given is its
/// entry's `env`.
pub(crate) const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
];

/// `url` as it may be logged: without its query (a key, maybe).
pub(super) fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.query().is_some() {
                parsed.set_query(Some("…"));
            }
            parsed.to_string()
        }
        Err(_) => "<the upstream's URL>".into(),
    }
}

/// A session with the server, as the supervisor runs it.
pub(super) type Session = RunningService<RoleClient, Listener>;

/// Hears the server's notifications: a changed tool list wakes the supervisor.
pub(super) struct Listener {
    changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// One upstream: how to reach it, and the session calls go through when it is up.
pub(crate) struct Link {
    pub(super) config: Upstream,
    /// The current session's number and peer.
    peer: RwLock<Option<(u64, Peer<RoleClient>)>>,
    /// The number of the last session made.
    sessions: std::sync::atomic::AtomicU64,
    /// The server said its tool list changed.
    changed: Arc<Notify>,
    /// A call found the server unreachable: the session is dropped and made again.
    broken: Notify,
    /// For an upstream that acts as each caller (`[upstreams.auth]`): its exchanges.
    pub(super) exchange: Option<super::exchange::Exchanger>,
    /// The bearers of the calls in flight, by pass (see `super::http`).
    pub(super) passes: Arc<super::http::Passes>,
    /// For a REST API (`openapi`): its document's operations and its HTTP client.
    pub(super) api: Option<super::openapi::Api>,
}

impl Link {
    /// The link to `config`'s server (not connected yet); fails only when the HTTP client of
    /// its exchanges cannot be built.
    pub(super) fn new(config: Upstream) -> Result<Arc<Link>, String> {
        let exchange = match &config.auth {
            Some(auth) => Some(super::exchange::Exchanger::new(&config.name, auth.clone())?),
            None => None,
        };
        let api = match &config.transport {
            Transport::OpenApi(source) => Some(super::openapi::Api::new(source.clone())?),
            _ => None,
        };
        Ok(Arc::new(Link {
            api,
            exchange,
            passes: Arc::default(),
            config,
            peer: RwLock::new(None),
            sessions: std::sync::atomic::AtomicU64::new(0),
            changed: Arc::new(Notify::new()),
            broken: Notify::new(),
        }))
    }

    /// The upstream's name.
    pub(super) fn name(&self) -> &str {
        &self.config.name
    }

    /// The current session's number and peer; `None` while the server is down.
    pub(super) fn peer(&self) -> Option<(u64, Peer<RoleClient>)> {
        self.peer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_peer(&self, peer: Option<(u64, Peer<RoleClient>)>) {
        *self.peer.write().unwrap_or_else(PoisonError::into_inner) = peer;
    }

    /// A call on session `session` found the server unreachable: the supervisor drops that
    /// session now (later calls are refused at once until it is back). A report about a session
    /// already replaced changes nothing.
    pub(super) fn report_broken(&self, session: u64) {
        let mut current = self.peer.write().unwrap_or_else(PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|(number, _)| *number == session)
        {
            *current = None;
            drop(current);
            self.broken.notify_one();
        }
    }

    /// `text` with the HTTP upstream's URL in it shown without its query, which may carry a
    /// key (an error of the HTTP client names the URL).
    pub(super) fn redacted(&self, text: &str) -> String {
        match &self.config.transport {
            Transport::Http { url, .. } => {
                let shown = shown_url(url);
                let mut text = text.replace(url.as_str(), &shown);
                if let Ok(parsed) = url::Url::parse(url) {
                    text = text.replace(parsed.as_str(), &shown);
                }
                text
            }
            Transport::Stdio { .. } | Transport::OpenApi(_) => text.to_owned(),
        }
    }

    /// Spawns the server (stdio) or reaches it (HTTP), and shakes hands.
    pub(super) async fn connect(&self) -> Result<Session, String> {
        let listener = Listener {
            changed: self.changed.clone(),
        };
        let connecting = async {
            match &self.config.transport {
                Transport::Stdio { program, args, env } => {
                    let mut command = tokio::process::Command::new(program);
                    // Not toolgate's environment (its database URL, other upstreams' tokens):
                    // only what a program needs to run, and the entry's own `env`.
                    command.args(args).env_clear();
                    for name in INHERITED_ENV {
                        if let Some(value) = std::env::var_os(name) {
                            command.env(name, value);
                        }
                    }
                    command.envs(env.iter().map(|(k, v)| (k, v)));
                    let (child, _) = rmcp::transport::TokioChildProcess::builder(command)
                        .stderr(std::process::Stdio::inherit())
                        .spawn()
                        .map_err(|err| format!("cannot start `{program}`: {err}"))?;
                    listener
                        .serve(child)
                        .await
                        .map_err(|err| format!("the MCP handshake failed: {err}"))
                }
                Transport::Http { url, headers } => {
                    use rmcp::transport::StreamableHttpClientTransport;
                    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                    let mut custom = std::collections::HashMap::new();
                    for (name, value) in headers {
                        // Checked when the config was read; a value from the environment may
                        // still be no header value.
                        let name = axum::http::HeaderName::from_bytes(name.as_bytes())
                            .map_err(|_| format!("`{name}` is not a header name"))?;
                        let value = axum::http::HeaderValue::from_str(value).map_err(|_| {
                            format!("the value of header `{name}` is not a header value")
                        })?;
                        custom.insert(name, value);
                    }
                    // reqwest is built without a crypto provider of its own (an https URL).
                    crate::base::install_crypto();
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(custom)
                        .max_json_response_size(MAX_RESPONSE_BYTES)
                        .reinit_on_expired_session(true);
                    let transport = StreamableHttpClientTransport::with_client(
                        super::http::Client::new(
                            self.exchange.is_some().then(|| self.passes.clone()),
                        )?,
                        config,
                    );
                    listener.serve(transport).await.map_err(|err| {
                        let err = self.redacted(&err.to_string());
                        format!("cannot reach {}: {err}", shown_url(url))
                    })
                }
                Transport::OpenApi(_) => Err("a REST API has no MCP session".to_owned()),
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| format!("no MCP handshake within {} s", CONNECT_TIMEOUT.as_secs()))?
    }

    /// The server's tool list, every page of it.
    pub(super) async fn list(session: &Peer<RoleClient>) -> Result<Vec<McpTool>, String> {
        tokio::time::timeout(LIST_TIMEOUT, session.list_all_tools())
            .await
            .map_err(|_| format!("no tool list within {} s", LIST_TIMEOUT.as_secs()))?
            .map_err(|err| format!("cannot read the tool list: {err}"))
    }

    /// Keeps the server reachable for as long as the process runs, starting from the session
    /// the start made and the tool list it read (already served), if it made one. `publish` is
    /// handed each tool list read after that.
    pub(super) async fn supervise<F: Future<Output = ()>>(
        self: Arc<Self>,
        mut started: Option<(Session, Vec<McpTool>)>,
        publish: impl Fn(Vec<McpTool>) -> F,
    ) {
        let mut backoff = FIRST_BACKOFF;
        let mut logged_down = false;
        loop {
            let (current, known) = match started.take() {
                Some((current, listed)) => (current, Some(listed)),
                None => match self.connect().await {
                    Ok(current) => (current, None),
                    Err(err) => {
                        if logged_down {
                            tracing::debug!(upstream = self.name(), error = %err, "still down");
                        } else {
                            tracing::warn!(
                                upstream = self.name(),
                                error = %err,
                                "the upstream MCP server cannot be reached; trying again"
                            );
                            logged_down = true;
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                },
            };
            let peer = current.peer().clone();
            let read = match known {
                Some(listed) => Ok(listed),
                None => match Link::list(&peer).await {
                    Ok(tools) => {
                        publish(tools.clone()).await;
                        Ok(tools)
                    }
                    Err(err) => Err(err),
                },
            };
            let listed = match read {
                Ok(tools) => {
                    // What the SDK logs of the handshake, in one line (at INFO, its whole
                    // answer; the binary keeps the SDK to warnings): who answered, in which
                    // protocol version.
                    if let Some(info) = peer.peer_info() {
                        let server = info.server_info.as_ref();
                        tracing::debug!(
                            upstream = self.name(),
                            protocol = info.protocol_version.as_str(),
                            server = server.map(|s| s.name.as_str()),
                            version = server.map(|s| s.version.as_str()),
                            "the MCP handshake is done"
                        );
                    }
                    tracing::info!(
                        upstream = self.name(),
                        tools = tools.len(),
                        "the upstream MCP server is up"
                    );
                    tools
                }
                Err(err) => {
                    tracing::warn!(upstream = self.name(), error = %err, "dropping the session");
                    drop(current);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            let number = self
                .sessions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            self.set_peer(Some((number, peer.clone())));
            logged_down = false;
            let began = tokio::time::Instant::now();
            let why = self.serve(current, &peer, number, listed, &publish).await;
            self.set_peer(None);
            backoff = if began.elapsed() >= HEALTHY_SESSION {
                FIRST_BACKOFF
            } else {
                (backoff * 2).min(MAX_BACKOFF)
            };
            tracing::warn!(
                upstream = self.name(),
                reason = why,
                retry_in_ms = backoff.as_millis() as u64,
                "the upstream MCP server went away; its tools answer 503 until it is back"
            );
            tokio::time::sleep(backoff).await;
        }
    }

    /// Runs one session until it ends, re-reading the tool list when it changes; says why it
    /// ended.
    async fn serve<F: Future<Output = ()>>(
        &self,
        session: Session,
        peer: &Peer<RoleClient>,
        number: u64,
        mut last: Vec<McpTool>,
        publish: &impl Fn(Vec<McpTool>) -> F,
    ) -> &'static str {
        let cancel = session.cancellation_token();
        let mut ended = std::pin::pin!(session.waiting());
        let mut refresh = self.config.refresh.map(|every| {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks
        });
        loop {
            let tick = async {
                match &mut refresh {
                    Some(ticks) => {
                        ticks.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut ended => return "the session ended (a stdio server that exited, or a closed connection)",
                () = self.broken.notified() => {
                    // A report about the session before this one, left for this one to see.
                    if self.peer().is_some_and(|(current, _)| current == number) {
                        continue;
                    }
                    cancel.cancel();
                    return "a call could not reach it";
                }
                () = self.changed.notified() => {}
                () = tick => {}
            }
            match Link::list(peer).await {
                Ok(tools) if tools == last => {}
                Ok(tools) => {
                    tracing::info!(
                        upstream = self.name(),
                        tools = tools.len(),
                        "tool list read again"
                    );
                    last = tools.clone();
                    publish(tools).await;
                }
                Err(err) => {
                    tracing::warn!(upstream = self.name(), error = %err, "cannot read the tool list again");
                }
            }
            // A server that says its list changed over and over is read at most 4 times a
            // second (the notifications meanwhile are one).
            tokio::time::sleep(RELIST_PAUSE).await;
        }
    }
}
