//! The process's metrics, in the Prometheus text format: what `GET /metrics` serves.
//!
//! One registry per process, like every Prometheus client's default registry: the call
//! lifecycle, the routes and the stores' batching writers record into it without being handed
//! anything (a store is opened before, and apart from, the router it serves). A process serving
//! several routers shows their sum. What is shared between replicas (the approvals pending, the
//! live replicas) is not kept here: `server/metrics.rs` reads it from the store at each scrape and
//! hands it to [`render`], so every replica shows the same, current figure.
//!
//! It imports nothing of the crate but its own files: the store's batching writers record into
//! it, so it stands below the store, and a call's status comes in as the name the store keeps
//! it under (`CallStatus::as_str`).
//!
//! The hot path pays a few atomic increments and one uncontended lock (a histogram's) per call:
//! each tool's series are resolved once, when the dispatcher is built ([`ToolMetrics`]), and each
//! route's at its first requests ([`RouteRequests`]). Nothing is looked up, formatted or
//! allocated per call.
//!
//! Each scrape lists the families in the order they are registered here (the store's figures
//! last), and each family's series sorted by their labels ([`sorted`]), so two scrapes list the
//! same series in the same order.

mod sorted;

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use sorted::SortedFamily;

/// The `Content-Type` of what [`render`] writes: the Prometheus text format, version 0.0.4.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

// The names, as registered; the text format adds `_total` to a counter's.
const CALLS: &str = "toolgate_calls";
const CALL_DURATION: &str = "toolgate_call_duration_seconds";
const APPROVALS_PENDING: &str = "toolgate_approvals_pending";
const APPROVAL_DECISION: &str = "toolgate_approval_decision_seconds";
const HTTP_REQUESTS: &str = "toolgate_http_requests";
const STORE_BATCH_SIZE: &str = "toolgate_store_batch_size";
const STORE_COMMIT: &str = "toolgate_store_commit_seconds";
const WEBHOOK_DELIVERIES: &str = "toolgate_webhook_deliveries";
const NOTIFICATIONS: &str = "toolgate_notifications";
const WAITERS: &str = "toolgate_waiters";
const RATE_LIMITED: &str = "toolgate_rate_limited";
const TOKEN_VERIFICATIONS: &str = "toolgate_token_verifications";
const KEY_SET_FETCHES: &str = "toolgate_key_set_fetches";
const REPLICAS_LIVE: &str = "toolgate_replicas_live";
const TRACE_SPANS: &str = "toolgate_trace_spans";
const STANDING_RELEASED: &str = "toolgate_standing_released";
const UPSTREAM_TOOLS_HELD: &str = "toolgate_upstream_tools_held";
const UPSTREAM_TOOL_CHANGES: &str = "toolgate_upstream_tool_changes";
const AUDIT_EXPORTED: &str = "toolgate_audit_exported";
const AUDIT_EXPORT_FAILURES: &str = "toolgate_audit_export_failures";
const AUDIT_EXPORT_LAG: &str = "toolgate_audit_export_lag";

/// A run, from echo's microseconds to a slow tool's minutes (retries included).
const CALL_DURATION_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 120.0,
];

/// A person's decision, from seconds to a week.
const APPROVAL_DECISION_BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 28800.0, 86400.0, 259200.0,
    604800.0,
];

/// Writes per batch, up to the writers' largest (512 waited for, 2048 written behind).
const BATCH_SIZE_BUCKETS: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];

/// A batch's transaction, from an fsync on a fast disk to the writers' 10 s bound.
const COMMIT_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0,
];

/// The statuses an outcome leaves a call in, as the store names them: all but `running`.
const OUTCOMES: [&str; 7] = [
    "suspended",
    "completed",
    "failed",
    "rejected",
    "interrupted",
    "needs_reconciliation",
    "expired",
];

/// Where the status named `status` is in [`OUTCOMES`]; `None` for `running`, which is no
/// outcome.
pub(crate) fn outcome_slot(status: &str) -> Option<usize> {
    OUTCOMES.iter().position(|s| *s == status)
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    status: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    status: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct QuotaLabels {
    tool: String,
    quota: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ChannelLabels {
    channel: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct UpstreamLabel {
    upstream: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct SinkLabel {
    sink: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct IssuerLabels {
    issuer: String,
    result: &'static str,
}

/// Every metric kept in the process, and the registry that renders them.
struct Metrics {
    registry: Registry,
    calls: SortedFamily<CallLabels, Counter>,
    call_duration: SortedFamily<ToolLabel, Histogram>,
    approval_decision: Histogram,
    http_requests: SortedFamily<RequestLabels, Counter>,
    store_batch_size: Histogram,
    store_commit: Histogram,
    webhook_deliveries: SortedFamily<ResultLabel, Counter>,
    notifications: SortedFamily<ChannelLabels, Counter>,
    waiters: Gauge,
    rate_limited: SortedFamily<QuotaLabels, Counter>,
    token_verifications: SortedFamily<IssuerLabels, Counter>,
    key_set_fetches: SortedFamily<IssuerLabels, Counter>,
    trace_spans: SortedFamily<ResultLabel, Counter>,
    standing_released: SortedFamily<ToolLabel, Counter>,
    upstream_tools_held: SortedFamily<UpstreamLabel, Gauge>,
    upstream_tool_changes: SortedFamily<UpstreamLabel, Counter>,
    audit_exported: SortedFamily<SinkLabel, Counter>,
    audit_export_failures: SortedFamily<SinkLabel, Counter>,
    audit_export_lag: SortedFamily<SinkLabel, Gauge>,
}

/// Registers in `$registry` each metric (a clone: the series are shared) under its name,
/// with its help.
macro_rules! register {
    ($registry:ident; $($name:expr => $metric:expr, $help:expr;)+) => {
        $($registry.register($name, $help, $metric.clone());)+
    };
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    fn new() -> Self {
        let metrics = Metrics {
            registry: Registry::default(),
            calls: SortedFamily::default(),
            call_duration: SortedFamily::new(|| Histogram::new(CALL_DURATION_BUCKETS)),
            approval_decision: Histogram::new(APPROVAL_DECISION_BUCKETS),
            http_requests: SortedFamily::default(),
            store_batch_size: Histogram::new(BATCH_SIZE_BUCKETS),
            store_commit: Histogram::new(COMMIT_BUCKETS),
            webhook_deliveries: SortedFamily::default(),
            notifications: SortedFamily::default(),
            waiters: Gauge::default(),
            rate_limited: SortedFamily::default(),
            token_verifications: SortedFamily::default(),
            key_set_fetches: SortedFamily::default(),
            trace_spans: SortedFamily::default(),
            standing_released: SortedFamily::default(),
            upstream_tools_held: SortedFamily::default(),
            upstream_tool_changes: SortedFamily::default(),
            audit_exported: SortedFamily::default(),
            audit_export_failures: SortedFamily::default(),
            audit_export_lag: SortedFamily::default(),
        };
        let mut registry = Registry::default();
        register! {
            registry;
            CALLS => metrics.calls,
                "Calls that reached a recorded outcome, by tool and the status it left them in";
            CALL_DURATION => metrics.call_duration,
                "How long a run of a tool took, from its first attempt to its outcome (retries and \
                their waits included)";
            APPROVAL_DECISION => metrics.approval_decision,
                "How long a suspension waited for a person's approval, rejection or completion";
            HTTP_REQUESTS => metrics.http_requests,
                "Requests answered, by route template (never the path itself) and status code";
            STORE_BATCH_SIZE => metrics.store_batch_size,
                "Writes committed together in one transaction of the store's batching writer \
                (records written behind their answer included)";
            STORE_COMMIT => metrics.store_commit,
                "How long one transaction of the store's batching writer took, from its start to \
                its commit";
            WEBHOOK_DELIVERIES => metrics.webhook_deliveries,
                "Webhook delivery attempts, by what they came to";
            NOTIFICATIONS => metrics.notifications,
                "Attempts to send a notification (email, Slack), by channel (its configured name) \
                and outcome (delivered, retried, failed)";
            WAITERS => metrics.waiters,
                "Requests held now by ?wait= until what they wait for changes";
            RATE_LIMITED => metrics.rate_limited,
                "Requests refused by a principal's quota, by tool (empty for a held request or a \
                stream, which belong to no tool) and quota (calls_per_minute, max_running, \
                max_held)";
            TOKEN_VERIFICATIONS => metrics.token_verifications,
                "Bearer tokens of an identity provider checked, by issuer (its configured name) and \
                result (accepted, or why refused)";
            KEY_SET_FETCHES => metrics.key_set_fetches,
                "Fetches of an issuer's key set (JWKS), by issuer and result (fetched, failed)";
            TRACE_SPANS => metrics.trace_spans,
                "Spans handed to the trace exporter ([telemetry]), by what came of them: exported, \
                or dropped because the queue was full or the collector did not take them";
            STANDING_RELEASED => metrics.standing_released,
                "Calls a standing approval released at once, by tool (each took one of its calls)";
            UPSTREAM_TOOLS_HELD => metrics.upstream_tools_held,
                "Tools of an upstream MCP server held now, by upstream: their definition changed \
                (or they are new) since they were pinned, and they wait for an admin";
            UPSTREAM_TOOL_CHANGES => metrics.upstream_tool_changes,
                "Changes of an upstream tool's definition this process found (each held for an \
                admin), by upstream";
            AUDIT_EXPORTED => metrics.audit_exported,
                "Entries of the audit chain this process delivered to an export ([audit.export]), \
                by sink (otlp, syslog)";
            AUDIT_EXPORT_FAILURES => metrics.audit_export_failures,
                "Attempts of an audit export that failed (each retried), by sink";
            AUDIT_EXPORT_LAG => metrics.audit_export_lag,
                "Entries of the audit chain not yet delivered to an export, as this process last \
                saw it, by sink";
        }
        Metrics {
            registry,
            ..metrics
        }
    }
}

/// The process's metrics, followed by the store's figures as they are now: the approvals
/// pending and, on a shared database, the replicas whose lease is live.
pub(crate) fn render(
    pending_approvals: u64,
    live_replicas: Option<u64>,
) -> Result<String, std::fmt::Error> {
    let mut text = String::with_capacity(16 * 1024);
    prometheus_text::encode(&mut text, &METRICS.registry)?;
    // Read at this scrape, so registered in a registry of its own: the process-wide one is
    // shared by every router of the process, each with its own store.
    let mut now = Registry::default();
    let gauge = |value: u64| {
        let gauge: Gauge = Gauge::default();
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        gauge
    };
    now.register(
        APPROVALS_PENDING,
        "Suspensions waiting for a person now (pending and unexpired), as the store holds them",
        gauge(pending_approvals),
    );
    if let Some(live) = live_replicas {
        now.register(
            REPLICAS_LIVE,
            "Replicas on the shared database whose lease is live now",
            gauge(live),
        );
    }
    prometheus_text::encode(&mut text, &now)?;
    Ok(text)
}

/// One tool's series, resolved once: counting an outcome is an atomic increment, timing a run
/// one histogram observation.
pub(crate) struct ToolMetrics {
    outcomes: [Counter; OUTCOMES.len()],
    duration: Histogram,
}

impl ToolMetrics {
    /// The series of `tool`, each outcome's at 0 until counted.
    pub(crate) fn new(tool: &str) -> Self {
        let metrics = &*METRICS;
        ToolMetrics {
            outcomes: OUTCOMES.map(|status| {
                metrics.calls.get_or_create(&CallLabels {
                    tool: tool.to_owned(),
                    status,
                })
            }),
            duration: metrics.call_duration.get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            }),
        }
    }

    /// A call of the tool recorded in `status` (its name as stored), without a run (a
    /// rejection, an external completion, an expiry, a settlement).
    pub(crate) fn outcome(&self, status: &str) {
        if let Some(slot) = outcome_slot(status) {
            self.outcomes[slot].inc();
        }
    }

    /// A run of the tool that took `took` and whose outcome, `status`, is recorded.
    pub(crate) fn ran(&self, status: &str, took: Duration) {
        self.outcome(status);
        self.duration.observe(took.as_secs_f64());
    }
}

/// A call of `tool` recorded in `status` (its name as stored), counted by looking its series
/// up: for what is not on a request's path (the calls of a dead replica or a previous process,
/// settled; a tool no longer served).
pub(crate) fn call_outcome(tool: &str, status: &str) {
    if let Some(slot) = outcome_slot(status) {
        METRICS
            .calls
            .get_or_create(&CallLabels {
                tool: tool.to_owned(),
                status: OUTCOMES[slot],
            })
            .inc();
    }
}

/// A person decided on a suspension `waited` after it was made.
pub(crate) fn approval_decided(waited: Duration) {
    METRICS.approval_decision.observe(waited.as_secs_f64());
}

/// A batch of `writes` committed (or failed) by a store's writer in `took`.
pub(crate) fn store_batch(writes: usize, took: Duration) {
    METRICS.store_batch_size.observe(writes as f64);
    METRICS.store_commit.observe(took.as_secs_f64());
}

/// Counts one webhook delivery attempt that came to `result`: a short word from a fixed set
/// (such as `delivered`, `retried`, `failed`), never a URL or an error message, since every
/// distinct value is a series kept for the life of the process.
pub(crate) fn webhook_delivery(result: &str) {
    METRICS
        .webhook_deliveries
        .get_or_create(&ResultLabel {
            result: result.to_owned(),
        })
        .inc();
}

/// Counts one attempt of the notification channel `channel` (a configured name, so a bounded
/// set) that came to `outcome` (`delivered`, `retried`, `failed`).
pub(crate) fn notification(channel: &str, outcome: &'static str) {
    METRICS
        .notifications
        .get_or_create(&ChannelLabels {
            channel: channel.to_owned(),
            outcome,
        })
        .inc();
}

/// Counts `entries` entries of the audit chain delivered to the export `sink`.
pub(crate) fn audit_exported(sink: &'static str, entries: u64) {
    METRICS
        .audit_exported
        .get_or_create(&SinkLabel { sink })
        .inc_by(entries);
}

/// Counts a failed attempt of the audit export `sink`.
pub(crate) fn audit_export_failed(sink: &'static str) {
    METRICS
        .audit_export_failures
        .get_or_create(&SinkLabel { sink })
        .inc();
}

/// How many entries the audit export `sink` has yet to deliver.
pub(crate) fn audit_export_lag(sink: &'static str, entries: i64) {
    METRICS
        .audit_export_lag
        .get_or_create(&SinkLabel { sink })
        .set(entries);
}

/// Counts `spans` spans of the trace exporter that came to `result` (`exported`,
/// `dropped_queue_full`, `dropped_export_failed`).
pub(crate) fn trace_spans(result: &'static str, spans: u64) {
    METRICS
        .trace_spans
        .get_or_create(&ResultLabel {
            result: result.to_owned(),
        })
        .inc_by(spans);
}

/// Counts a call of `tool` released by a standing approval: looked up on that path only.
pub(crate) fn standing_released(tool: &str) {
    METRICS
        .standing_released
        .get_or_create(&ToolLabel {
            tool: tool.to_owned(),
        })
        .inc();
}

/// The upstream `upstream`'s tools held now (`held`), and the changes found since its last
/// tool list (`found`): set on a tool list's read, never on a call's path.
pub(crate) fn upstream_pins(upstream: &str, held: usize, found: usize) {
    let label = UpstreamLabel {
        upstream: upstream.to_owned(),
    };
    METRICS
        .upstream_tools_held
        .get_or_create(&label)
        .set(i64::try_from(held).unwrap_or(i64::MAX));
    if found > 0 {
        METRICS
            .upstream_tool_changes
            .get_or_create(&label)
            .inc_by(found as u64);
    }
}

/// Counts a request refused by `quota` (a quota key), for `tool` (empty when it is none's):
/// looked up on the refusal's path only, where a lookup costs nothing a client is waiting for.
pub(crate) fn rate_limited(tool: &str, quota: &'static str) {
    METRICS
        .rate_limited
        .get_or_create(&QuotaLabels {
            tool: tool.to_owned(),
            quota,
        })
        .inc();
}

/// The count of bearer tokens of the issuer `issuer` checked with `result` (a word from a fixed
/// set), resolved once: a token accepted on every request is counted without a lookup.
pub(crate) fn token_verifications(issuer: &str, result: &'static str) -> Counter {
    METRICS.token_verifications.get_or_create(&IssuerLabels {
        issuer: issuer.to_owned(),
        result,
    })
}

/// Counts a bearer token of the issuer `issuer` refused for `result`: looked up on the
/// refusal's path only.
pub(crate) fn token_verified(issuer: &str, result: &'static str) {
    token_verifications(issuer, result).inc();
}

/// Counts a fetch of the issuer `issuer`'s key set that came to `result`.
pub(crate) fn key_set_fetched(issuer: &str, result: &'static str) {
    METRICS
        .key_set_fetches
        .get_or_create(&IssuerLabels {
            issuer: issuer.to_owned(),
            result,
        })
        .inc();
}

/// A request held by `?wait=`: counted in `toolgate_waiters` from its creation until it is
/// dropped.
pub(crate) struct Waiting(());

impl Waiting {
    /// Counts a request that starts to wait.
    pub(crate) fn start() -> Self {
        METRICS.waiters.inc();
        Waiting(())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        METRICS.waiters.dec();
    }
}

/// The status codes a route answers often enough to keep their counter at hand.
const COMMON_STATUSES: [u16; 16] = [
    200, 202, 400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 500, 503, 504, 429,
];

/// One route's request counters by status, resolved at its first request with each status: a
/// request then costs a comparison of the route template and an atomic increment.
#[derive(Default)]
pub(crate) struct RouteRequests {
    /// The route template this route's requests are counted under, from its first request.
    route: OnceLock<Box<str>>,
    by_status: [OnceLock<Counter>; COMMON_STATUSES.len()],
}

impl RouteRequests {
    /// Counts a request for `route` (its template) answered with `status`.
    pub(crate) fn count(&self, route: &str, status: u16) {
        let own = self.route.get_or_init(|| route.into());
        let slot = COMMON_STATUSES.iter().position(|s| *s == status);
        match slot {
            // Another template through the same route (a router nested under two prefixes), or
            // a rare status: looked up.
            Some(slot) if **own == *route => self.by_status[slot]
                .get_or_init(|| http_requests(route, status))
                .inc(),
            _ => http_requests(route, status).inc(),
        };
    }
}

fn http_requests(route: &str, status: u16) -> Counter {
    METRICS.http_requests.get_or_create(&RequestLabels {
        route: route.to_owned(),
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_rendered_with_its_help_and_type() {
        // A family is rendered once it has a series.
        ToolMetrics::new("echo").ran("completed", Duration::from_micros(20));
        webhook_delivery("delivered");
        RouteRequests::default().count("/tools/{name}", 404);
        let text = render(3, Some(2)).unwrap();
        for (name, kind) in [
            ("toolgate_calls_total", "counter"),
            ("toolgate_call_duration_seconds", "histogram"),
            ("toolgate_approvals_pending", "gauge"),
            ("toolgate_approval_decision_seconds", "histogram"),
            ("toolgate_http_requests_total", "counter"),
            ("toolgate_store_batch_size", "histogram"),
            ("toolgate_store_commit_seconds", "histogram"),
            ("toolgate_webhook_deliveries_total", "counter"),
            ("toolgate_waiters", "gauge"),
            ("toolgate_replicas_live", "gauge"),
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} {kind} in {text}"
            );
        }
        assert!(text.contains("toolgate_webhook_deliveries_total{result=\"delivered\"} "));
        assert!(
            text.contains("toolgate_http_requests_total{route=\"/tools/{name}\",status=\"404\"} ")
        );
        assert!(text.contains("toolgate_approvals_pending 3\n"));
        assert!(text.contains("toolgate_replicas_live 2\n"));
        let single = render(0, None).unwrap();
        assert!(!single.contains("toolgate_replicas_live"));
    }

    #[test]
    fn only_outcomes_are_counted() {
        assert_eq!(outcome_slot("running"), None);
        assert_eq!(outcome_slot("no_such_status"), None);
        for status in OUTCOMES {
            assert!(outcome_slot(status).is_some());
        }
    }
}
