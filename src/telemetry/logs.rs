//! Log lines: the usual text with the active span's `trace_id` and `span_id` at the end, or one
//! JSON object per line (`log_format = "json"`) for log pipelines.

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The ids of the OpenTelemetry span active on this thread, if one is (the
/// `tracing-opentelemetry` layer makes a span's context current while it is entered).
fn trace_ids() -> Option<(String, String)> {
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        (
            context.trace_id().to_string(),
            context.span_id().to_string(),
        )
    })
}

/// The inner text format, with ` trace_id=… span_id=…` before the line's end when a span is
/// active.
pub(super) struct WithTraceIds<F>(pub(super) F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = trace_ids() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        writeln!(writer, "{line} trace_id={trace_id} span_id={span_id}")
    }
}

/// One JSON object per line: `timestamp` (RFC 3339), `level`, `target`, `message`, the event's
/// other fields, and `trace_id` / `span_id` when a span is active.
pub(super) struct JsonLines;

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_string()));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(
                humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
            ),
        );
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_owned()));
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        if let Some(message) = fields.0.remove("message") {
            line.insert("message".into(), message);
        }
        for (name, value) in fields.0 {
            // The line's own keys keep their meaning; a field of the same name is prefixed.
            let name = if line.contains_key(&name) {
                format!("field.{name}")
            } else {
                name
            };
            line.insert(name, value);
        }
        if let Some((trace_id, span_id)) = trace_ids() {
            line.insert("trace_id".into(), Value::String(trace_id));
            line.insert("span_id".into(), Value::String(span_id));
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}
