//! `[audit.export]`: every entry of the audit chain pushed, in order and at least once, to where
//! security teams look: OpenTelemetry logs over OTLP/HTTP ([`otlp`]), so that any collector
//! forwards them to a SIEM, and syslog (RFC 5424 with octet counting, over TCP or TLS:
//! [`syslog`]).
//!
//! Each export keeps, in the store, the last entry it delivered and who sends it now (a claim
//! with a deadline, so that one replica at a time sends, and another takes over when it dies):
//! a backlog is simply the entries after that one, and survives a restart. An attempt that
//! fails is retried with a growing pause; what was sent before a failure may be sent again (at
//! least once). Its state is at `GET /audit/exports` and in `/metrics`.

mod otlp;
mod syslog;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::store::{AuditEntry, Store};

/// `[audit.export]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// An OTLP/HTTP collector (`http://host:4318`, or the full `.../v1/logs` URL): each entry
    /// is a log record, sent as protobuf.
    pub otlp_endpoint: Option<String>,
    /// A syslog receiver: `tcp://host:port` or `tls://host:port` (RFC 5424 messages, octet
    /// counted, RFC 6587 and 5425).
    pub syslog_url: Option<String>,
}

/// One destination of the export.
trait Sink: Send + Sync {
    /// Sends `entries`, in order; fails with why (then some may have been delivered).
    fn send<'a>(
        &'a mut self,
        entries: &'a [AuditEntry],
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;
}

/// The most entries sent in one attempt.
const BATCH: u32 = 500;

/// How long a claim holds without being renewed: a process that dies lets another send after
/// that (one that stops cleanly lets go at once).
const LEASE_MS: i64 = 10_000;

/// How often an export looks for new entries.
const TICK: Duration = Duration::from_millis(500);

/// The longest pause after failures.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

impl ExportConfig {
    /// Checks the URLs now (a bad one stops the start, naming the key).
    pub fn check(&self) -> Result<(), String> {
        if let Some(url) = &self.otlp_endpoint {
            otlp::endpoint(url).map_err(|err| format!("audit.export.otlp_endpoint: {err}"))?;
        }
        if let Some(url) = &self.syslog_url {
            syslog::Target::parse(url).map_err(|err| format!("audit.export.syslog_url: {err}"))?;
        }
        Ok(())
    }

    /// Starts an exporter for each destination configured, as `owner` (this process), until
    /// `released`.
    pub fn start(
        &self,
        store: Arc<dyn Store>,
        owner: String,
        released: tokio::sync::watch::Receiver<bool>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut sinks: Vec<(&'static str, Box<dyn Sink>)> = Vec::new();
        if let Some(url) = &self.otlp_endpoint {
            match otlp::Otlp::new(url) {
                Ok(sink) => sinks.push(("otlp", Box::new(sink))),
                Err(err) => tracing::error!(error = %err, "the audit export to OTLP cannot start"),
            }
        }
        if let Some(url) = &self.syslog_url {
            match syslog::Syslog::new(url) {
                Ok(sink) => sinks.push(("syslog", Box::new(sink))),
                Err(err) => {
                    tracing::error!(error = %err, "the audit export to syslog cannot start")
                }
            }
        }
        for (name, sink) in sinks {
            runtime.spawn(export(
                store.clone(),
                name,
                sink,
                owner.clone(),
                released.clone(),
            ));
        }
    }
}

/// One export's loop: claim it, send what follows its last delivered entry, record how far it
/// got; again every [`TICK`], or after a pause that grows with each failure.
async fn export(
    store: Arc<dyn Store>,
    name: &'static str,
    mut sink: Box<dyn Sink>,
    owner: String,
    mut released: tokio::sync::watch::Receiver<bool>,
) {
    let mut pause = TICK;
    loop {
        let stopping = tokio::select! {
            () = tokio::time::sleep(pause) => false,
            _ = released.wait_for(|released| *released) => true,
        };
        if stopping {
            if let Err(err) = store.release_audit_export(name, &owner).await {
                tracing::debug!(sink = name, error = %err, "cannot let go of the audit export");
            }
            return;
        }
        pause = match round(&*store, name, &mut *sink, &owner).await {
            Ok(true) => Duration::ZERO,
            Ok(false) => TICK,
            Err(err) => {
                tracing::warn!(sink = name, error = %err, "the audit export failed; retrying");
                crate::metrics::audit_export_failed(name);
                (pause * 2).clamp(TICK, MOST_BACKOFF)
            }
        };
    }
}

/// One attempt: whether a full batch was sent (more may follow at once).
async fn round(
    store: &dyn Store,
    name: &'static str,
    sink: &mut dyn Sink,
    owner: &str,
) -> Result<bool, String> {
    let Some(after) = store
        .claim_audit_export(name, owner, LEASE_MS)
        .await
        .map_err(|err| err.to_string())?
    else {
        return Ok(false);
    };
    let entries = store
        .audit_entries(after, BATCH)
        .await
        .map_err(|err| err.to_string())?;
    let last = entries.last().map_or(after, |entry| entry.seq);
    // A batch short of full is the whole chain as it stood (the read settles what was written
    // first): its last entry is the head. Only a full one asks for the head, again.
    let full = entries.len() == BATCH as usize;
    let head = match full {
        true => store
            .audit_head()
            .await
            .map_err(|err| err.to_string())?
            .map_or(last, |head| head.seq),
        false => last,
    };
    crate::metrics::audit_export_lag(name, head.saturating_sub(after));
    if entries.is_empty() {
        return Ok(false);
    }
    if let Err(err) = sink.send(&entries).await {
        let _ = store
            .settle_audit_export(name, owner, after, 0, Some(err.clone()))
            .await;
        return Err(err);
    }
    let sent = i64::try_from(entries.len()).unwrap_or(i64::MAX);
    store
        .settle_audit_export(name, owner, last, sent, None)
        .await
        .map_err(|err| err.to_string())?;
    crate::metrics::audit_exported(name, sent.unsigned_abs());
    crate::metrics::audit_export_lag(name, head.saturating_sub(last));
    Ok(full)
}
