//! What the binary makes of the configuration at start-up, beyond its sections' options: the
//! store it names, opened, and a refusal of [`ServerBuilder::start`](crate::ServerBuilder::start)
//! worded in the configuration's terms (the key to change, or the flag to pass).

use std::path::PathBuf;
use std::sync::Arc;

use super::Config;
use crate::app::StartError;
use crate::store::{PostgresStore, SqliteStore, Store, StoreError};

/// Why the store the configuration names could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// The data directory could not be created.
    #[error("cannot create the data directory {}: {source}", path.display())]
    DataDir {
        /// The directory (`data_dir`).
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The PostgreSQL database could not be reached or migrated; the error names the
    /// database without its password.
    #[error("cannot open the PostgreSQL store: {0}")]
    Postgres(StoreError),
    /// The SQLite file could not be opened or migrated.
    #[error("cannot open the store at {}: {source}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
}

impl Config {
    /// Creates the data directory (the SQLite file and the examples' outbox live in it), then
    /// opens the store this configuration names: PostgreSQL when `store.database_url` is set,
    /// else the embedded SQLite file `toolgate.db` in the data directory.
    pub async fn open_store(&self) -> Result<Arc<dyn Store>, OpenStoreError> {
        std::fs::create_dir_all(&self.data_dir).map_err(|source| OpenStoreError::DataDir {
            path: self.data_dir.clone(),
            source,
        })?;
        match self.store.postgres_url() {
            Some(url) => {
                let store = PostgresStore::open(url, self.store.postgres_options())
                    .await
                    .map_err(OpenStoreError::Postgres)?;
                tracing::info!(
                    replica = store.replica_id(),
                    database = store.target(),
                    "serving as a replica on PostgreSQL"
                );
                Ok(Arc::new(store))
            }
            None => {
                let path = self.data_dir.join("toolgate.db");
                match SqliteStore::open(&path) {
                    Ok(store) => Ok(Arc::new(store)),
                    Err(source) => Err(OpenStoreError::Sqlite { path, source }),
                }
            }
        }
    }

    /// `refused`, said in this configuration's terms: the key that makes the server refuse to
    /// start, or the flag that lets it.
    pub fn refusal(&self, refused: &StartError) -> String {
        match refused {
            StartError::NoCredentials { addr } => format!(
                "refusing to listen on {addr} without API keys: configure [[auth.keys]] (see \
                 config/default.toml), or pass --insecure-no-auth to let anyone who can reach \
                 it call tools and approve calls"
            ),
            StartError::UnknownTool { tool } => {
                format!("config key `tools.{tool}`: no tool is named `{tool}`")
            }
            StartError::ApprovalField { tool, key, message } => format!(
                "config key `{}.{key}`: {message}",
                self.approval_table_key(tool)
            ),
            other => other.to_string(),
        }
    }
}
