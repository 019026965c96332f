//! `[telemetry]`: where traces go, and the top-level `log_format`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[telemetry]`. With neither `otlp_endpoint` nor one of the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables set, no span is
/// made and nothing is exported.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP (protobuf) collector, e.g. `http://127.0.0.1:4318`; spans are posted to
    /// its `/v1/traces` (a URL that already ends in `/v1/traces` is used as it is).
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of every span; unset: `OTEL_SERVICE_NAME`, else `toolgate`.
    pub service_name: Option<String>,
    /// The share of new traces recorded, 0.0 to 1.0; a trace whose parent (from the caller) is
    /// sampled is always recorded, one whose parent is not never is.
    pub sample_ratio: f64,
    /// Headers sent with every export (a collector's key); `${NAME}` in a value is read from
    /// the environment. `OTEL_EXPORTER_OTLP_HEADERS` adds to them.
    pub headers: BTreeMap<String, String>,
    /// Names of `baggage` entries copied onto the spans of a request as attributes
    /// (`baggage.<name>`); no other baggage ever becomes an attribute.
    pub baggage_attributes: Vec<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: None,
            sample_ratio: 1.0,
            headers: BTreeMap::new(),
            baggage_attributes: Vec::new(),
        }
    }
}

/// The top-level `log_format`: how each log line is written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// The OTLP traces URL for a configured endpoint: `/v1/traces` appended unless it is there.
pub(super) fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

impl TelemetryConfig {
    /// Checks the section; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) || self.sample_ratio.is_nan() {
            return Err(format!(
                "telemetry.sample_ratio must be between 0.0 and 1.0, not {}",
                self.sample_ratio
            ));
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            let url = reqwest::Url::parse(endpoint)
                .map_err(|e| format!("telemetry.otlp_endpoint is not a URL ({e}): {endpoint:?}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!(
                    "telemetry.otlp_endpoint must be an http:// or https:// URL: {endpoint:?}"
                ));
            }
        }
        for name in self.headers.keys() {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("telemetry.headers: {name:?} is not a header name"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("https://api.example/otlp/v1/traces"),
            "https://api.example/otlp/v1/traces"
        );
    }

    #[test]
    fn bad_values_are_named() {
        let ratio = TelemetryConfig {
            sample_ratio: 1.5,
            ..TelemetryConfig::default()
        };
        assert!(ratio.check().unwrap_err().contains("sample_ratio"));
        let endpoint = TelemetryConfig {
            otlp_endpoint: Some("ftp://x".into()),
            ..TelemetryConfig::default()
        };
        assert!(endpoint.check().unwrap_err().contains("otlp_endpoint"));
        assert!(TelemetryConfig::default().check().is_ok());
    }
}
