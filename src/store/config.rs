//! `[store]`: where calls are stored (the embedded SQLite file, or a PostgreSQL shared by
//! replicas), and the translation into [`PostgresOptions`](super::PostgresOptions).
//!
//! The URL may carry a password, so this section's `Debug` shows it redacted: the
//! configuration is logged at start-up.

use std::time::Duration;

use serde::Deserialize;

use super::{PostgresOptions, redact_url};

/// `[store]`.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// A PostgreSQL URL (`postgres://user:password@host:port/db`); empty: the embedded SQLite
    /// file in `data_dir`.
    pub database_url: String,
    /// The most pooled connections to PostgreSQL for reads.
    pub pool_size: usize,
    /// How long a replica's lease lasts without a heartbeat, in milliseconds.
    pub lease_ttl_ms: u64,
    /// How often a replica renews its lease and sweeps the calls of dead ones, in milliseconds.
    pub heartbeat_ms: u64,
}

impl std::fmt::Debug for StoreConfig {
    // The URL may carry a password: shown redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("database_url", &redact_url(&self.database_url))
            .field("pool_size", &self.pool_size)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .finish()
    }
}

impl Default for StoreConfig {
    // SQLite, and PostgreSQL's own defaults for when a URL is given.
    fn default() -> Self {
        let options = PostgresOptions::default();
        StoreConfig {
            database_url: String::new(),
            pool_size: options.pool_size,
            lease_ttl_ms: options.lease_ttl.as_millis() as u64,
            heartbeat_ms: options.heartbeat.as_millis() as u64,
        }
    }
}

impl StoreConfig {
    /// The PostgreSQL URL, when one is set.
    pub fn postgres_url(&self) -> Option<&str> {
        Some(self.database_url.trim()).filter(|url| !url.is_empty())
    }

    /// The PostgreSQL store's options.
    pub fn postgres_options(&self) -> PostgresOptions {
        PostgresOptions {
            pool_size: self.pool_size,
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            heartbeat: Duration::from_millis(self.heartbeat_ms),
        }
    }
}
