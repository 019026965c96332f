//! The audit chain as OpenTelemetry logs over OTLP/HTTP: each entry a log record (its JSON line
//! as the body; its number, hash and event type as attributes; its time as the record's), sent
//! as protobuf to the collector's `/v1/logs`, which forwards them wherever it is told to.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use super::Sink;
use crate::store::AuditEntry;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The collector's logs URL: `endpoint` itself when it names `/v1/logs`, else that path under it.
pub(super) fn endpoint(endpoint: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(endpoint).map_err(|err| format!("`{endpoint}`: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{endpoint}` is not an http(s) URL"));
    }
    if url.path().ends_with("/v1/logs") {
        return Ok(url);
    }
    let base = endpoint.trim_end_matches('/');
    url::Url::parse(&format!("{base}/v1/logs")).map_err(|err| format!("`{endpoint}`: {err}"))
}

/// An OTLP/HTTP collector.
pub(super) struct Otlp {
    client: reqwest::Client,
    url: url::Url,
    /// The URL as errors name it: without a user or password it may carry.
    shown: String,
}

impl Otlp {
    pub(super) fn new(endpoint_url: &str) -> Result<Self, String> {
        crate::base::install_crypto();
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| format!("no HTTP client: {err}"))?;
        let url = endpoint(endpoint_url)?;
        let mut shown = url.clone();
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        Ok(Otlp {
            client,
            url,
            shown: shown.to_string(),
        })
    }
}

fn text(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..KeyValue::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..KeyValue::default()
    }
}

/// The log record of one entry.
fn record(entry: &AuditEntry, observed: u64) -> LogRecord {
    let event: serde_json::Value = serde_json::from_str(&entry.entry).unwrap_or_default();
    let at = event["at"].as_u64().unwrap_or_default();
    let mut attributes = vec![
        int("toolgate.audit.seq", entry.seq),
        text("toolgate.audit.hash", entry.hash.clone()),
    ];
    if let Some(kind) = event["event"]["type"].as_str() {
        attributes.push(text("toolgate.audit.type", kind.to_owned()));
    }
    if let Some(call_id) = event["event"]["call_id"].as_str() {
        attributes.push(text("toolgate.call_id", call_id.to_owned()));
    }
    LogRecord {
        time_unix_nano: at.saturating_mul(1_000_000),
        observed_time_unix_nano: observed,
        // INFO
        severity_number: 9,
        severity_text: "INFO".into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(entry.line())),
        }),
        attributes,
        event_name: "toolgate.audit".into(),
        ..LogRecord::default()
    }
}

/// The request carrying `entries`, in order.
pub(super) fn request(entries: &[AuditEntry]) -> ExportLogsServiceRequest {
    let observed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or_default();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![text("service.name", "toolgate".into())],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "toolgate.audit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..InstrumentationScope::default()
                }),
                log_records: entries.iter().map(|e| record(e, observed)).collect(),
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

impl Sink for Otlp {
    fn send<'a>(
        &'a mut self,
        entries: &'a [AuditEntry],
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            let body = request(entries).encode_to_vec();
            let response = self
                .client
                .post(self.url.clone())
                .header("content-type", "application/x-protobuf")
                .body(body)
                .send()
                .await
                .map_err(|err| format!("{}: {}", self.shown, err.without_url()))?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("{} answered {status}", self.shown))
            }
        })
    }
}
