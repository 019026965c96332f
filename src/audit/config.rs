//! `[audit]`: how often the audit chain's head is signed.

use std::time::Duration;

use serde::Deserialize;

/// `[audit]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// How often the chain's head is signed (a checkpoint), in seconds; and once more at a
    /// graceful stop.
    pub checkpoint_interval_s: u64,
    /// `[audit.export]`: where every entry is pushed too.
    pub export: super::export::ExportConfig,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            checkpoint_interval_s: 60,
            export: super::export::ExportConfig::default(),
        }
    }
}

impl AuditConfig {
    /// The interval between checkpoints (at least a second).
    pub fn checkpoint_interval(&self) -> Duration {
        Duration::from_secs(self.checkpoint_interval_s.max(1))
    }
}
