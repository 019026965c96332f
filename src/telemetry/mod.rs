//! Traces: OpenTelemetry spans of the doors and of the call lifecycle, sent to an OTLP/HTTP
//! collector, and the filter and format of log lines.
//!
//! toolgate's spans are `tracing` spans of one target ([`TARGET`]) that `tracing-opentelemetry`
//! turns into OpenTelemetry spans; the exporter ([`export`]) posts them in batches and never
//! makes a call wait. With no collector configured ([`config::TelemetryConfig`]), no span of this
//! target is ever made: every place that would make one asks [`enabled`] first (one relaxed
//! atomic load), so the call path costs what it did without traces.
//!
//! What is never an attribute: a call's input or output, a token, a key, a person's reason.

pub mod config;
mod export;
mod filter;
mod logs;
pub mod propagation;
pub mod spans;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use config::{LogFormat, TelemetryConfig};
pub use filter::log_filter;

/// The `tracing` target of every span toolgate exports, and of none it only logs.
pub const TARGET: &str = "toolgate::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// `[telemetry] sample_ratio`, as the bits of an `f64`.
static SAMPLE_RATIO: AtomicU64 = AtomicU64::new(0);

/// Whether a trace is recorded, decided once at its root, before any span is made: a parent
/// from the caller decides by its sampled flag; a new trace is recorded with the probability
/// `sample_ratio`. A trace that is not recorded has no span of toolgate's at all, so an
/// unsampled request costs one random number, not the making of spans nobody will see.
pub(crate) fn sampled(parent: &opentelemetry::Context) -> bool {
    use opentelemetry::trace::TraceContextExt as _;
    let span = parent.span();
    let context = span.span_context();
    if context.is_valid() {
        return context.is_sampled();
    }
    let ratio = f64::from_bits(SAMPLE_RATIO.load(Ordering::Relaxed));
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    // A thread's own xorshift: no lock, no system call per request.
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            let mut seed = [0u8; 8];
            let _ = getrandom::fill(&mut seed);
            u64::from_le_bytes(seed) | 1
        });
    }
    let draw = STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    });
    ((draw >> 11) as f64 / (1u64 << 53) as f64) < ratio
}

/// Whether spans are made and exported in this process.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What [`init`] started: flush it before the process exits, or the last spans are lost.
#[must_use]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    flusher: Option<export::Flusher>,
}

impl Telemetry {
    /// Exports the spans still queued, waiting at most `within`.
    pub async fn flush(&self, within: Duration) {
        if let Some(flusher) = &self.flusher {
            flusher.flush(within).await;
        }
    }

    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

/// Where spans go, once the configuration and the standard variables are read.
struct Export {
    url: String,
    service_name: String,
}

/// The collector's traces URL: `[telemetry] otlp_endpoint`, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
/// as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`; `None`: no traces.
fn export_of(config: &TelemetryConfig, env: &impl Fn(&str) -> Option<String>) -> Option<Export> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let url = match &config.otlp_endpoint {
        Some(endpoint) => config::traces_url(endpoint),
        None => match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => url,
            None => config::traces_url(&set("OTEL_EXPORTER_OTLP_ENDPOINT")?),
        },
    };
    let service_name = config
        .service_name
        .clone()
        .or_else(|| set("OTEL_SERVICE_NAME"))
        .unwrap_or_else(|| "toolgate".to_owned());
    Some(Export { url, service_name })
}

/// Installs the process's subscriber: log lines to stderr (filtered by `log`, in `format`),
/// and, when a collector is configured, the spans of [`TARGET`] to it. Must run inside a tokio
/// runtime (the exporter is a task of it). `env` reads the environment.
pub fn init(
    log: EnvFilter,
    format: LogFormat,
    config: &TelemetryConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Telemetry, String> {
    let ansi = std::io::stderr().is_terminal();
    let Some(export) = export_of(config, &env) else {
        // No traces: the subscriber is what it was before traces existed.
        match format {
            LogFormat::Text => tracing_subscriber::fmt()
                .with_env_filter(log)
                .with_writer(std::io::stderr)
                .with_ansi(ansi)
                .init(),
            LogFormat::Json => tracing_subscriber::fmt()
                .with_env_filter(log)
                .with_writer(std::io::stderr)
                .event_format(logs::JsonLines)
                .init(),
        }
        return Ok(Telemetry {
            provider: None,
            flusher: None,
        });
    };
    let mut headers = std::collections::HashMap::new();
    for (name, value) in &config.headers {
        let value = crate::base::expand(value, &env)
            .map_err(|e| format!("telemetry.headers.{name} {e}"))?;
        headers.insert(name.clone(), value);
    }
    crate::base::install_crypto();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("cannot build the trace exporter's HTTP client: {e}"))?;
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(export.url.clone())
        .with_headers(headers)
        .build()
        .map_err(|e| format!("cannot set up the trace exporter: {e}"))?;
    let resource = Resource::builder()
        .with_service_name(export.service_name.clone())
        .build();
    opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
    let shown = redacted(&export.url);
    let processor =
        export::QueueProcessor::start(exporter, export::Batching::from_env(&env), shown.clone());
    let flusher = processor.flusher();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        // Roots are sampled before their span is made (`sampled`): the SDK records every span
        // toolgate makes, and follows a caller's parent as it says.
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("toolgate");
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_filter(filter_fn(|meta| meta.target() == TARGET));
    // The exported spans stay out of the log lines (which carry their ids instead).
    let not_ours = filter_fn(|meta| meta.target() != TARGET);
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .event_format(logs::WithTraceIds(
                tracing_subscriber::fmt::format().with_ansi(ansi),
            ))
            .with_filter(log.and(not_ours))
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .event_format(logs::JsonLines)
            .with_filter(log.and(not_ours))
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines)
        .with(spans)
        .try_init()
        .map_err(|e| format!("cannot install the trace subscriber: {e}"))?;
    propagation::set_baggage_attributes(config.baggage_attributes.clone());
    SAMPLE_RATIO.store(config.sample_ratio.to_bits(), Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(
        endpoint = %shown,
        service_name = %export.service_name,
        sample_ratio = config.sample_ratio,
        "exporting traces over OTLP/HTTP"
    );
    Ok(Telemetry {
        provider: Some(provider),
        flusher: Some(flusher),
    })
}

/// `url` without a user, a password or a query, for logs.
fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.to_string()
        }
        Err(_) => "(an invalid URL)".to_owned(),
    }
}
