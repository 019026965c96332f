//! W3C Trace Context and Baggage, in and out: from a request's headers and from an MCP
//! message's `_meta` (`traceparent`, `tracestate`, `baggage`), and into an upstream request's.
//!
//! What comes in is bounded before it is read: the headers by the server's limits, a `_meta`
//! value by [`MAX_VALUE`]; the propagators drop what does not parse.

use std::sync::OnceLock;

use opentelemetry::baggage::BaggageExt as _;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use serde_json::{Map, Value};

/// The longest `_meta` value read (W3C's own limits: `tracestate` 512 bytes, `baggage` 8,192).
const MAX_VALUE: usize = 8192;

static BAGGAGE_ATTRIBUTES: OnceLock<Vec<String>> = OnceLock::new();

/// `[telemetry] baggage_attributes`: the baggage entries that become attributes.
pub(super) fn set_baggage_attributes(names: Vec<String>) {
    let _ = BAGGAGE_ATTRIBUTES.set(names);
}

/// The most characters of a baggage value kept in an attribute.
const MAX_ATTRIBUTE_CHARS: usize = 256;

/// A baggage value as an attribute shows it: a caller's text, so capped at
/// [`MAX_ATTRIBUTE_CHARS`] and with every control character (a line break, say) a space. Markup
/// stays text: an attribute is data, which a trace viewer shows as such.
fn cleaned(value: &str) -> String {
    value
        .chars()
        .take(MAX_ATTRIBUTE_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The configured baggage entries present in `cx`, as `baggage.<name>` attributes (each value
/// [`cleaned`]).
pub fn baggage_attributes(cx: &Context) -> Vec<KeyValue> {
    let Some(names) = BAGGAGE_ATTRIBUTES.get().filter(|names| !names.is_empty()) else {
        return Vec::new();
    };
    let baggage = cx.baggage();
    names
        .iter()
        .filter_map(|name| {
            baggage
                .get(name.as_str())
                .map(|value| KeyValue::new(format!("baggage.{name}"), cleaned(value.as_str())))
        })
        .collect()
}

/// The trace context `carrier` holds, with its baggage only when some of it may become an
/// attribute (nothing else reads it).
fn extract(carrier: &dyn Extractor) -> Context {
    let cx = TraceContextPropagator::new().extract(carrier);
    if BAGGAGE_ATTRIBUTES
        .get()
        .is_some_and(|names| !names.is_empty())
    {
        BaggagePropagator::new().extract_with_context(&cx, carrier)
    } else {
        cx
    }
}

/// The trace context (and baggage) a request's headers carry; an empty context if none.
pub fn from_headers(headers: &axum::http::HeaderMap) -> Context {
    // Most requests carry none: nothing to parse.
    if !headers.contains_key("traceparent") {
        return Context::new();
    }
    extract(&HeaderExtractor(headers))
}

/// An MCP message's `_meta`, read as a carrier of its reserved keys.
struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .and_then(Value::as_str)
            .filter(|value| value.len() <= MAX_VALUE)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The trace context an MCP request's `_meta` carries, if it carries a valid `traceparent`.
pub fn from_meta(meta: &Map<String, Value>) -> Option<Context> {
    let cx = extract(&Meta(meta));
    cx.span().span_context().is_valid().then_some(cx)
}

struct MetaOut<'a>(&'a mut Map<String, Value>);

impl Injector for MetaOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), Value::String(value));
    }
}

/// Writes `cx`'s `traceparent` and `tracestate` into an outgoing MCP message's `_meta`.
pub fn inject_meta(cx: &Context, meta: &mut Map<String, Value>) {
    TraceContextPropagator::new().inject_context(cx, &mut MetaOut(meta));
}

/// Writes `cx`'s `traceparent` and `tracestate` into outgoing HTTP headers.
pub fn inject_headers(cx: &Context, headers: &mut axum::http::HeaderMap) {
    TraceContextPropagator::new().inject_context(cx, &mut HeaderInjector(headers));
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_baggage_value_is_capped_and_has_no_control_characters() {
        let long = format!("a\nb\r\u{7}<i>{}", "é".repeat(400));
        let kept = cleaned(&long);
        assert_eq!(kept.chars().count(), MAX_ATTRIBUTE_CHARS);
        assert!(kept.starts_with("a b  <i>éé"), "{kept}");
        assert_eq!(cleaned("acme"), "acme");
    }

    #[test]
    fn meta_round_trips_a_traceparent() {
        let mut meta = Map::new();
        meta.insert("traceparent".into(), Value::String(PARENT.into()));
        let cx = from_meta(&meta).expect("a valid traceparent");
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let mut out = Map::new();
        inject_meta(&cx, &mut out);
        assert_eq!(out["traceparent"], PARENT);
    }

    #[test]
    fn a_bad_or_oversized_traceparent_is_no_context() {
        for bad in [
            "00-00000000000000000000000000000000-b7ad6b7169203331-01".to_owned(),
            "garbage".to_owned(),
            format!("{PARENT}{}", " ".repeat(MAX_VALUE)),
        ] {
            let mut meta = Map::new();
            meta.insert("traceparent".into(), Value::String(bad));
            assert!(from_meta(&meta).is_none());
        }
        let mut meta = Map::new();
        meta.insert("traceparent".into(), Value::from(7));
        assert!(from_meta(&meta).is_none());
    }
}
