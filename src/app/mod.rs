//! The composition root: [`ServerBuilder`] builds the dispatcher, starts and stops the
//! background work (upstream MCP servers, the webhooks' sender, the store's upkeep), merges
//! each door's router (REST, `/mcp`, `/inbox`), and puts the tower stack in one visible place.
//!
//! Everything a running server does is started here, not in the binary: an app that mounts
//! [`ServerBuilder::build`]'s router in its own axum server gets the same server, upkeep
//! included, and [`Serving::drain`] is the graceful stop the binary uses. The checks the binary
//! makes before it serves are here too ([`ServerBuilder::start`], in `start.rs`), so an app that
//! starts the builder the same way is refused the same things.

mod start;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use tower_http::trace::{DefaultOnRequest, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::contract::registry::ToolSet;
use crate::dispatch::{DEFAULT_MAX_JSON_DEPTH, DispatchConfig, Dispatcher, Running};
use crate::http::auth::{Access, ApiKey, Keys};
use crate::http::error::ApiError;
use crate::http::gate::Gates;
use crate::http::hosts::AllowedHosts;
use crate::http::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_IN_FLIGHT};
use crate::identity::Issuers;
use crate::store::{Store, Timestamp};

pub use start::StartError;

/// How long the change feed keeps its entries by default: a day.
pub const DEFAULT_FEED_RETENTION: Duration = Duration::from_secs(86_400);
/// How often the store's upkeep runs by default: every minute.
pub const DEFAULT_UPKEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Builds the toolgate `Router` from a tool set and a store.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = toolgate::store::SqliteStore::open("toolgate.db")?;
/// let router = toolgate::ServerBuilder::new(toolgate::ToolSet::new(), store).build();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, router).await?;
/// # Ok(()) }
/// ```
pub struct ServerBuilder {
    tools: ToolSet,
    store: Arc<dyn Store>,
    max_body_bytes: usize,
    max_json_depth: usize,
    max_in_flight: usize,
    body_timeout: Duration,
    allowed_hosts: Vec<String>,
    keys: Vec<ApiKey>,
    issuers: Arc<Issuers>,
    dispatch: DispatchConfig,
    webhooks: crate::feed::webhooks::Webhooks,
    notify: Option<crate::notify::Notify>,
    mcp: crate::mcp::McpOptions,
    inbox: crate::inbox::InboxOptions,
    people: crate::notify::People,
    upstreams: crate::upstream::Upstreams,
    signing: crate::signing::Signing,
    slack: crate::rest::SlackInteractions,
    feed_retention: Duration,
    upkeep_interval: Duration,
    checkpoint_interval: Duration,
    audit_export: crate::audit::export::ExportConfig,
    /// Where the server listens, when the caller says ([`ServerBuilder::listen_address`]).
    listen: Option<std::net::SocketAddr>,
    insecure_no_auth: bool,
}

impl ServerBuilder {
    /// A builder serving `tools`, recording in `store`.
    pub fn new(tools: ToolSet, store: impl Store) -> Self {
        ServerBuilder::with_shared_store(tools, Arc::new(store))
    }

    /// Like [`ServerBuilder::new`], with a store the caller keeps a handle on.
    pub fn with_shared_store(tools: ToolSet, store: Arc<dyn Store>) -> Self {
        ServerBuilder {
            tools,
            store,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            body_timeout: crate::http::body::DEFAULT_BODY_TIMEOUT,
            allowed_hosts: crate::mcp::McpOptions::default().allowed_hosts,
            keys: Vec::new(),
            issuers: Arc::default(),
            dispatch: DispatchConfig::default(),
            webhooks: crate::feed::webhooks::Webhooks::none(),
            notify: None,
            mcp: crate::mcp::McpOptions::default(),
            inbox: crate::inbox::InboxOptions::default(),
            people: crate::notify::People::none(),
            upstreams: crate::upstream::Upstreams::none(),
            signing: crate::signing::Signing::default(),
            slack: crate::rest::SlackInteractions::none(),
            feed_retention: DEFAULT_FEED_RETENTION,
            upkeep_interval: DEFAULT_UPKEEP_INTERVAL,
            checkpoint_interval: crate::audit::AuditConfig::default().checkpoint_interval(),
            audit_export: crate::audit::export::ExportConfig::default(),
            listen: None,
            insecure_no_auth: false,
        }
    }

    /// The largest request body accepted, in bytes; larger ones get `413 payload_too_large`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The deepest JSON nesting accepted in inputs and outputs; deeper gets `400 bad_request`.
    pub fn max_json_depth(mut self, depth: usize) -> Self {
        self.max_json_depth = depth;
        self
    }

    /// The most requests handled at once; more get `503 overloaded` at once instead of a queue.
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.max_in_flight = requests.max(1);
        self
    }

    /// How long a request body may take to arrive (default 30 s); past it, `408
    /// request_timeout` and the connection is closed. A body is read whole before its request
    /// takes a slot of `max_in_flight`.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The `Host` values every route accepts (names or addresses; without a port, any port),
    /// against DNS rebinding; a request whose `Origin` names another host is refused too. By
    /// default, loopback names only (`localhost`, `127.0.0.1`, `::1`): a server reached under
    /// another name must list it. [`McpOptions`](crate::mcp::McpOptions)' hosts are added.
    pub fn allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    /// The API keys; with none (the default), auth is off and every request acts as admin.
    pub fn api_keys(mut self, keys: Vec<ApiKey>) -> Self {
        self.keys = keys;
        self
    }

    /// The identity providers whose bearer tokens are principals beside the API keys
    /// (`[[auth.issuers]]`); with any, auth is on.
    pub fn issuers(mut self, issuers: Issuers) -> Self {
        self.issuers = Arc::new(issuers);
        self
    }

    /// Per-tool timeouts, concurrency limits and approval TTLs, and the retry policy.
    pub fn dispatch_config(mut self, config: DispatchConfig) -> Self {
        self.dispatch = config;
        self
    }

    /// The webhooks to deliver the change feed to (`Config::webhooks`); they start when the
    /// router is built, which must then happen inside a tokio runtime.
    pub fn webhooks(mut self, webhooks: crate::feed::webhooks::Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// `/mcp`: whether it is served, and the `Host` values it accepts (by default, loopback
    /// names only: a server reached under another name must list it).
    pub fn mcp(mut self, options: crate::mcp::McpOptions) -> Self {
        self.mcp = options;
        self
    }

    /// The notification channels (`Config::notify`: `[[notify]]` and the `[[people]]` they
    /// reach): their messages ride the webhooks' outbox, which starts for them too. With no
    /// channel nothing is made and nothing costs.
    pub fn notify(mut self, notify: crate::notify::Notify) -> Self {
        self.notify = (!notify.is_empty()).then_some(notify);
        self
    }

    /// `/inbox`, the approvers' web page: whether it is served, how long a sign-in lasts, and
    /// whether its cookies are `Secure` (see [`crate::inbox`]).
    pub fn inbox(mut self, options: crate::inbox::InboxOptions) -> Self {
        self.inbox = options;
        self
    }

    /// The people (`[[people]]`) whom decision links decide as, when no channel is configured
    /// (the channels of [`ServerBuilder::notify`] bring their own): for links an application
    /// makes itself ([`crate::notify::Links`]).
    pub fn people(mut self, people: crate::notify::People) -> Self {
        self.people = people;
        self
    }

    /// How toolgate signs the attestations of upstream calls ([`crate::signing::Signing`]):
    /// by default with keys it makes and keeps in the store.
    pub fn signing(mut self, signing: crate::signing::Signing) -> Self {
        self.signing = signing;
        self
    }

    /// Upstream MCP servers whose tools are served too ([`crate::upstream::Upstreams::connect`]);
    /// their supervisors start when the router is built, which must then happen inside a tokio
    /// runtime.
    pub fn upstreams(mut self, upstreams: crate::upstream::Upstreams) -> Self {
        self.upstreams = upstreams;
        self
    }

    /// The Slack apps whose buttons decide approvals at `POST /integrations/slack/interactions`
    /// (their signing secrets), and the people their users are. By default, those of the
    /// `[[notify]]` Slack channels with a `signing_secret_env` ([`ServerBuilder::notify`]);
    /// with none, that route refuses every request.
    pub fn slack_interactions(mut self, slack: crate::rest::SlackInteractions) -> Self {
        self.slack = slack;
        self
    }

    /// How long the change feed keeps its entries (`[feed] retention_s`; default a day): older
    /// ones are pruned by the store's upkeep, and a cursor older than that is `410`.
    pub fn feed_retention(mut self, retention: Duration) -> Self {
        self.feed_retention = retention;
        self
    }

    /// How often the store's upkeep runs (default every minute): it prunes the feed past its
    /// retention and the inbox sessions that ran out.
    pub fn upkeep_interval(mut self, interval: Duration) -> Self {
        self.upkeep_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// How often the audit chain's head is signed (`[audit] checkpoint_interval_s`; default a
    /// minute), and once more at a graceful stop ([`Serving::drain`]). Nothing is signed when
    /// signing is off ([`ServerBuilder::signing`]).
    pub fn audit_checkpoints(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval.max(Duration::from_millis(100));
        self
    }

    /// Where every entry of the audit chain is pushed too (`[audit.export]`: OTLP logs,
    /// syslog); by default nowhere. Started with the router.
    pub fn audit_export(mut self, export: crate::audit::export::ExportConfig) -> Self {
        self.audit_export = export;
        self
    }

    /// The router, with every route and layer in place. Built inside a tokio runtime, it starts
    /// the store's upkeep (and the webhooks and upstreams, when configured) there.
    pub fn build(self) -> Router {
        self.build_with_running().0
    }

    /// The router, and the count of calls it runs: a graceful shutdown waits for
    /// [`Running::idle`] after the server stops accepting, so no tool is cut off half-way
    /// (calls run on even when their client hangs up).
    pub fn build_with_running(self) -> (Router, Running) {
        let serving = self.serve();
        (serving.router, serving.running)
    }

    /// The router, and what a graceful stop of it needs ([`Serving`]), without the start's
    /// checks ([`ServerBuilder::start`] makes them first).
    pub fn serve(self) -> Serving {
        let grace = drain_grace(&self.dispatch);
        let public_url = match (&self.inbox.public_url, self.listen) {
            (url, _) if !url.is_empty() => url.clone(),
            (_, Some(addr)) => format!("http://{addr}"),
            (_, None) => "http://127.0.0.1:8080".to_owned(),
        };
        // Attestations are signed as the public URL: their `iss`.
        let signer = self
            .signing
            .signer(self.store.clone(), &public_url)
            .map(Arc::new);
        let mut dispatcher =
            Dispatcher::with_config(Arc::new(self.tools), self.store, &self.dispatch)
                .with_max_json_depth(self.max_json_depth);
        if let Some(signer) = &signer {
            dispatcher = dispatcher.with_signer(signer.clone());
        }
        let running = dispatcher.running().clone();
        let store = dispatcher.store().clone();
        // The audit chain's head, signed with the same key.
        let checkpoints = signer.map(|signer| {
            let checkpoints = Arc::new(crate::audit::Checkpointer::new(store.clone(), signer));
            checkpoints
                .clone()
                .start(self.checkpoint_interval, running.released());
            checkpoints
        });
        let owner = store
            .replica()
            .map_or_else(|| format!("process-{}", std::process::id()), str::to_owned);
        self.audit_export
            .start(store.clone(), owner, running.released());

        // The background work: each loop ends at the graceful stop.
        let pins = self.upstreams.book();
        self.upstreams.start(&dispatcher);
        // Decision links, in messages and on the inbox's link pages, under the public URL.
        let plain = self.inbox.links == crate::inbox::config::LinkMode::SignIn;
        let links = crate::notify::Links::new(store.clone(), &public_url, self.inbox.link_ttl);
        let links = Arc::new(links.sign_in_only(plain));
        let people = match &self.notify {
            Some(notify) => notify.people().clone(),
            None => Arc::new(self.people),
        };
        let slack = match &self.notify {
            Some(notify) if self.slack.is_empty() => slack_interactions(notify, &public_url),
            _ => self.slack,
        };
        let channels = self.notify.and_then(|notify| {
            let notify = notify.with_links(links.clone());
            notify.bind(dispatcher.clone(), public_url)
        });
        let webhooks = self
            .webhooks
            .with_channels(channels)
            .start(store.clone(), running.released());
        start_upkeep(
            store.clone(),
            running.released(),
            self.feed_retention,
            self.upkeep_interval,
        );
        start_escalations(dispatcher.clone(), running.released());

        // The doors, side by side over one set of gates.
        let auth = !self.keys.is_empty() || self.issuers.enabled();
        let mut hosts = self.allowed_hosts;
        for host in &self.mcp.allowed_hosts {
            if !hosts.contains(host) {
                hosts.push(host.clone());
            }
        }
        // `/mcp`'s SDK checks the same list again, as a backstop.
        let mut mcp_options = self.mcp;
        mcp_options.allowed_hosts = hosts.clone();
        let gates = Gates::new(
            AllowedHosts::new(&hosts),
            Arc::new(Keys::new(self.keys).with_issuers(self.issuers.clone())),
            self.max_in_flight,
            self.max_body_bytes,
            self.body_timeout,
        );
        let mut router = crate::rest::router(dispatcher.clone(), webhooks, &gates, auth, slack);
        router = router.merge(crate::rest::upstreams::router(
            dispatcher.clone(),
            pins.clone(),
            &gates,
        ));
        if mcp_options.enabled {
            // The same gate as the tools (a caller may list and call; held requests of
            // `toolgate_await_call` give their slot back while they wait).
            let door = crate::mcp::Door::new(dispatcher.clone());
            let mcp = crate::mcp::route(door, &mcp_options, self.max_body_bytes);
            router = router.route("/mcp", mcp.layer(gates.holding(Access::Tools)));
        }
        if let Some(resource) = self.issuers.resource() {
            // RFC 9728's metadata: public, and served only once an identity provider is.
            let document = axum::Json(resource.document.clone());
            for path in &resource.paths {
                let document = document.clone();
                let get = axum::routing::get(move || async move { document });
                router = router.route(path, get.layer(gates.route(Access::Discovery)));
            }
        }
        if self.inbox.enabled {
            let inbox =
                crate::inbox::router(dispatcher.clone(), self.inbox, &gates, links, people, pins);
            router = router.merge(inbox);
        }
        let router = router
            .fallback(|| async { ApiError::RouteNotFound })
            .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed });
        Serving {
            router: traced(router),
            running,
            store,
            grace,
            checkpoints,
        }
    }
}

/// A built server: its router, and what its graceful stop needs.
pub struct Serving {
    /// Every route and layer.
    pub router: Router,
    running: Running,
    store: Arc<dyn Store>,
    grace: Duration,
    /// Signs the audit chain's head a last time before the store closes.
    checkpoints: Option<Arc<crate::audit::Checkpointer>>,
}

impl Serving {
    /// The calls running now. A graceful stop's first step, as the server stops accepting, is
    /// [`Running::release_held`]: requests held for a change (`?wait=`, streams) are answered
    /// now, with the state as it is.
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// A graceful stop's last step, once the server no longer serves: waits for the calls still
    /// running to be recorded, as long as the slowest tool may take with its retries (a call
    /// cut off by the process's exit is recovered at the next start), then closes the store.
    pub async fn drain(self) {
        let running = &self.running;
        if running.count() > 0 {
            tracing::info!(
                calls = running.count(),
                "waiting for running calls to be recorded"
            );
            if tokio::time::timeout(self.grace, running.idle())
                .await
                .is_err()
            {
                tracing::warn!(
                    calls = running.count(),
                    "calls still running at exit; the next start recovers them"
                );
            }
        }
        if let Some(checkpoints) = &self.checkpoints
            && let Err(err) = checkpoints.checkpoint().await
        {
            tracing::warn!(error = %err, "cannot checkpoint the audit chain at exit");
        }
        if let Err(err) = self.store.close().await {
            tracing::warn!(error = %err, "the store did not close cleanly");
        }
    }
}

/// The interactions door of `notify`'s Slack channels: each one's signing secret, its people,
/// and links to the inbox under `base`.
fn slack_interactions(
    notify: &crate::notify::Notify,
    base: &str,
) -> crate::rest::SlackInteractions {
    let mut slack = crate::rest::SlackInteractions::new(notify.people().clone(), base);
    for (secret, api_url) in notify.slack_apps() {
        slack = match slack.clone().app(secret.as_bytes(), api_url) {
            Ok(with) => with,
            Err(why) => {
                tracing::warn!(error = %why, "a Slack channel's interactions are refused");
                slack
            }
        };
    }
    slack
}

/// How long calls still running at a stop may take: as long as the slowest tool may, its
/// retries and their waits included, and a second more.
fn drain_grace(dispatch: &DispatchConfig) -> Duration {
    let retry = dispatch.retry;
    let backoffs: Duration = (1..retry.max_attempts).map(|n| retry.backoff(n)).sum();
    dispatch
        .tools
        .values()
        .map(|tool| tool.timeout)
        .chain([dispatch.defaults.timeout])
        .max()
        .unwrap_or_default()
        .saturating_mul(retry.max_attempts)
        + backoffs
        + Duration::from_secs(1)
}

/// The store's upkeep, every `interval` until the graceful stop: feed entries older than
/// `retention` are dropped, and inbox sessions that ran out (they are refused from their expiry
/// on anyway). Outside a tokio runtime there is nowhere to run it, and it is said so.
fn start_upkeep(
    store: Arc<dyn Store>,
    mut released: tokio::sync::watch::Receiver<bool>,
    retention: Duration,
    interval: Duration,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("built outside a tokio runtime: the store's upkeep does not run");
        return;
    };
    let keep_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = released.wait_for(|released| *released) => return,
            }
            let before = Timestamp(Timestamp::now().0.saturating_sub(keep_ms));
            if let Err(err) = store.prune_feed(before).await {
                tracing::debug!(error = %err, "cannot prune the feed now");
            }
            if let Err(err) = store.prune_sessions(Timestamp::now()).await {
                tracing::debug!(error = %err, "cannot prune inbox sessions now");
            }
            if let Err(err) = store.prune_link_keys(Timestamp::now()).await {
                tracing::debug!(error = %err, "cannot prune decision links' keys now");
            }
        }
    });
}

/// The sweep of approvals left undecided past their policy's `escalate_after_s` (see
/// `crate::dispatch`'s `escalate`), until the graceful stop; at a pace the shortest of them sets.
fn start_escalations(dispatcher: Dispatcher, mut released: tokio::sync::watch::Receiver<bool>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(dispatcher.escalation_tick()) => {}
                _ = released.wait_for(|released| *released) => return,
            }
            if let Err(err) = dispatcher.escalate_due().await {
                tracing::debug!(error = %err, "cannot escalate approvals now");
            }
        }
    });
}

/// One span per request, named by its route template rather than its path, so suspension
/// tokens in paths are never logged; the call id is added once known. And one access-log line
/// per request. Both are DEBUG, and the layer is only there when DEBUG is on for either when
/// the router is built: at the default INFO it would cost about a tenth of an echo call's CPU,
/// and what is logged about a call at INFO and above names its `call_id` and `tool` itself.
///
/// When traces are exported, each request also has its OpenTelemetry `SERVER` span
/// ([`crate::http::traces`]), outside the access log's layer: its "started processing request"
/// and "finished processing request" lines are written while the `SERVER` span is entered, so
/// they carry its trace as every other line of the request does.
fn traced(mut router: Router) -> Router {
    let logged = tracing::enabled!(target: "toolgate::app", Level::DEBUG)
        || tracing::enabled!(target: "tower_http::trace::on_response", Level::DEBUG);
    if logged {
        router = router.layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    let route = req
                        .extensions()
                        .get::<MatchedPath>()
                        .map_or("unmatched", |path| path.as_str());
                    tracing::debug_span!(
                        "request",
                        method = %req.method(),
                        route,
                        call_id = tracing::field::Empty,
                    )
                })
                .on_request(DefaultOnRequest::new().level(Level::DEBUG))
                .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
        );
    }
    // The last layer added is the outermost.
    if crate::telemetry::enabled() {
        router = router.layer(crate::http::traces::Traced);
    }
    router
}
