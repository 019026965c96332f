//! `[examples]`: whether the demo tools are served, and the knobs they read.

use serde::Deserialize;

/// Settings of the example tools.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExamplesConfig {
    /// Whether the example tools are served.
    pub enabled: bool,
    /// `issue_refund` suspends for approval above this amount, in cents.
    pub approval_threshold_cents: u64,
    /// How long `send_email` takes before it appends to the outbox, in milliseconds.
    pub send_email_delay_ms: u64,
}

impl Default for ExamplesConfig {
    fn default() -> Self {
        ExamplesConfig {
            enabled: true,
            approval_threshold_cents: 10_000,
            send_email_delay_ms: 0,
        }
    }
}
