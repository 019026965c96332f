//! The server as the harness talks to it ([`Admin`], on its maintenance database), the scratch
//! databases it creates for the scenarios, and the counters read from them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{HARNESS_CLIENT, connect, pg_error, shown, with_database};

/// The server, as the harness talks to it: its maintenance database.
pub struct Admin {
    client: tokio_postgres::Client,
    url: String,
    /// `SELECT version()`.
    pub version: String,
    /// `SHOW synchronous_commit`.
    pub synchronous_commit: String,
    /// The postmaster's process id, when the server runs on this machine (for its CPU time).
    pub postmaster: Option<u32>,
    /// A connection to each scenario database probed with [`Admin::last_seq`].
    probes: tokio::sync::Mutex<std::collections::HashMap<String, tokio_postgres::Client>>,
}

impl Admin {
    /// Connects; the error says why PostgreSQL cannot be used.
    pub async fn connect(url: &str) -> Result<Admin, String> {
        let client = connect(url).await?;
        let row = client
            .query_one(
                "SELECT version(), current_setting('synchronous_commit'), pg_backend_pid()",
                &[],
            )
            .await
            .map_err(|e| format!("{}: {}", shown(url), pg_error(&e)))?;
        let backend: i32 = row.get(2);
        Ok(Admin {
            client,
            url: url.to_owned(),
            version: row.get(0),
            synchronous_commit: row.get(1),
            postmaster: u32::try_from(backend)
                .ok()
                .and_then(crate::cpu::postmaster_of),
            probes: Default::default(),
        })
    }

    /// A fresh database for scenario `label`.
    pub async fn scratch(&self, label: &str) -> Result<ScratchDb, String> {
        let mut dbs = self.scratch_many(&[label]).await?;
        Ok(dbs.pop().expect("one database"))
    }

    /// A fresh database for each of `labels`, created at once (each `CREATE DATABASE` copies
    /// `template0` and waits for its WAL to be flushed, a third of a second here).
    pub async fn scratch_many(&self, labels: &[&str]) -> Result<Vec<ScratchDb>, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let creating: Vec<_> = labels
            .iter()
            .map(|label| {
                let name = format!(
                    "toolgate_bench_{}_{}_{label}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed)
                );
                let url = self.url.clone();
                tokio::spawn(async move {
                    let created = create_database(&url, &name).await;
                    let db = ScratchDb {
                        url: with_database(&url, &name),
                        admin_url: url,
                        name,
                        dropped: created.is_err(),
                    };
                    created.map(|()| db)
                })
            })
            .collect();
        let mut dbs = Vec::new();
        let mut failed = None;
        for task in creating {
            match task.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(db) => dbs.push(db),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            // Those created are dropped with `dbs`.
            Some(e) => Err(e),
            None => Ok(dbs),
        }
    }

    /// The cluster's and database `db`'s counters now.
    pub async fn sample(&self, db: &str) -> Result<Counters, String> {
        let row = self
            .client
            .query_one(
                "SELECT d.xact_commit, d.xact_rollback, d.tup_inserted, d.tup_updated, \
                   d.tup_deleted, d.active_time, d.idle_in_transaction_time, \
                   (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, w.wal_sync, w.wal_sync_time \
                 FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = $1",
                &[&db],
            )
            .await
            .map_err(|e| format!("sampling {db}: {e}"))?;
        Ok(Counters {
            transactions: row.get(0),
            rollbacks: row.get(1),
            inserted: row.get(2),
            updated: row.get(3),
            deleted: row.get(4),
            active_ms: row.get(5),
            idle_in_transaction_ms: row.get(6),
            wal_bytes: row.get(7),
            wal_syncs: row.get(8),
            wal_sync_ms: row.get(9),
        })
    }

    /// Waits (up to 5 s) until no backend is connected to `db`: each flushes its statistics as
    /// it exits.
    pub async fn wait_for_no_backends(&self, db: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let connected = self
                .client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&db],
                )
                .await
                .map_or(0, |row| row.get::<_, i64>(0));
            if connected == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last sequence number of a committed call in database `db` (`max(seq)` of `calls`:
    /// the index's last entry). Calls are numbered as they are inserted, so this counts them,
    /// up to the batches of other replicas still uncommitted beneath it.
    pub async fn last_seq(&self, db: &str) -> Result<i64, String> {
        let mut probes = self.probes.lock().await;
        if !probes.contains_key(db) {
            let client = connect(&with_database(&self.url, db)).await?;
            probes.insert(db.to_owned(), client);
        }
        let row = probes[db]
            .query_one("SELECT coalesce(max(seq), 0) FROM calls", &[])
            .await
            .map_err(|e| format!("max(seq) in {db}: {}", pg_error(&e)))?;
        Ok(row.get(0))
    }

    /// Closes the probes' connections (a database with a client connected cannot be dropped
    /// cleanly, and its statistics wait for its clients).
    pub async fn close_probes(&self) {
        self.probes.lock().await.clear();
    }

    /// The backends connected to database `db` but the harness's own (its probes), with the
    /// CPU each has used so far, in seconds (when the server runs on this machine).
    pub async fn backends(&self, db: &str) -> Result<Vec<(u32, f64)>, String> {
        let rows = self
            .client
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 \
                 AND application_name <> $2",
                &[&db, &HARNESS_CLIENT],
            )
            .await
            .map_err(|e| format!("backends of {db}: {}", pg_error(&e)))?;
        Ok(rows
            .iter()
            .filter_map(|row| u32::try_from(row.get::<_, i32>(0)).ok())
            .filter_map(|pid| Some((pid, crate::cpu::process_s(pid)?)))
            .collect())
    }

    /// The URL it connected to.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Creates database `name` on a connection of its own.
async fn create_database(admin_url: &str, name: &str) -> Result<(), String> {
    let client = connect(admin_url).await?;
    // PostgreSQL refuses to copy a template that another CREATE DATABASE is copying in some
    // cases (the tests create databases too, maybe at the same time): retried.
    let mut tries = 0;
    loop {
        match client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .await
        {
            Ok(()) => {
                // The time its sessions spend in WAL fsyncs, in pg_stat_wal (a superuser's
                // setting: without it, that column stays empty).
                let _ = client
                    .batch_execute(&format!(
                        "ALTER DATABASE {name} SET track_wal_io_timing = on"
                    ))
                    .await;
                return Ok(());
            }
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("CREATE DATABASE {name}: {}", pg_error(&e))),
        }
    }
}

/// A database created for the run; dropped (its connections closed) by [`ScratchDb::remove`], or
/// when this is dropped.
pub struct ScratchDb {
    /// Its name.
    pub name: String,
    /// A URL to it, for servers and clients.
    pub url: String,
    admin_url: String,
    dropped: bool,
}

impl ScratchDb {
    /// Drops the database.
    pub async fn remove(mut self, admin: &Admin) {
        self.dropped = true;
        let _ = admin
            .client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await;
    }

    /// Once every client has left (each backend flushes its statistics as it exits), reads the
    /// statistics of `table`, then drops the database, on connections of its own.
    pub async fn close(
        self,
        scenario: &'static str,
        table: &'static str,
    ) -> Result<TableStats, String> {
        let admin = Admin::connect(&self.admin_url).await?;
        admin.wait_for_no_backends(&self.name).await;
        let stats = self.table_stats(scenario, table).await;
        self.remove(&admin).await;
        stats
    }

    /// The table statistics of `table` in this database, and its size on disk.
    pub async fn table_stats(&self, scenario: &str, table: &str) -> Result<TableStats, String> {
        let client = connect(&self.url).await?;
        let row = client
            .query_one(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, \
                   pg_total_relation_size(relid), pg_relation_size(relid), \
                   (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid), \
                   seq_scan, seq_tup_read, coalesce(idx_scan, 0) \
                 FROM pg_stat_user_tables s WHERE relname = $1",
                &[&table],
            )
            .await
            .map_err(|e| format!("statistics of {table} in {}: {e}", self.name))?;
        let rows: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        Ok(TableStats {
            scenario: scenario.to_owned(),
            table: table.to_owned(),
            rows,
            inserted: row.get(0),
            updated: row.get(1),
            hot_updated: row.get(2),
            total_bytes: row.get(3),
            heap_bytes: row.get(4),
            indexes: row.get(5),
            seq_scans: row.get(6),
            seq_rows_read: row.get(7),
            index_scans: row.get(8),
        })
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (name, url) = (self.name.clone(), self.admin_url.clone());
        // A runtime of its own: this may run while the harness's is unwinding.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let client = connect(&url).await.ok()?;
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Counters of one database (transactions, rows, time in its backends) and of the cluster (WAL).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// `xact_commit`.
    pub transactions: i64,
    /// `xact_rollback`.
    pub rollbacks: i64,
    /// `tup_inserted`.
    pub inserted: i64,
    /// `tup_updated`.
    pub updated: i64,
    /// `tup_deleted`.
    pub deleted: i64,
    /// `active_time`: time its backends spent running statements, in ms.
    pub active_ms: f64,
    /// `idle_in_transaction_time`: time its backends spent in a transaction waiting for the
    /// client's next statement, in ms.
    pub idle_in_transaction_ms: f64,
    /// WAL written by the whole cluster (`pg_current_wal_lsn()`), in bytes.
    pub wal_bytes: i64,
    /// WAL fsyncs by the whole cluster (`pg_stat_wal.wal_sync`).
    pub wal_syncs: i64,
    /// Time spent in those fsyncs by sessions that time them (`wal_sync_time`, in ms): the
    /// scenario databases' sessions do (`track_wal_io_timing`), the WAL writer does not.
    pub wal_sync_ms: f64,
}

impl Counters {
    /// `self - before`.
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            transactions: self.transactions - before.transactions,
            rollbacks: self.rollbacks - before.rollbacks,
            inserted: self.inserted - before.inserted,
            updated: self.updated - before.updated,
            deleted: self.deleted - before.deleted,
            active_ms: self.active_ms - before.active_ms,
            idle_in_transaction_ms: self.idle_in_transaction_ms - before.idle_in_transaction_ms,
            wal_bytes: self.wal_bytes - before.wal_bytes,
            wal_syncs: self.wal_syncs - before.wal_syncs,
            wal_sync_ms: self.wal_sync_ms - before.wal_sync_ms,
        }
    }

    /// `self + other`.
    pub fn plus(self, other: Counters) -> Counters {
        Counters {
            transactions: self.transactions + other.transactions,
            rollbacks: self.rollbacks + other.rollbacks,
            inserted: self.inserted + other.inserted,
            updated: self.updated + other.updated,
            deleted: self.deleted + other.deleted,
            active_ms: self.active_ms + other.active_ms,
            idle_in_transaction_ms: self.idle_in_transaction_ms + other.idle_in_transaction_ms,
            wal_bytes: self.wal_bytes + other.wal_bytes,
            wal_syncs: self.wal_syncs + other.wal_syncs,
            wal_sync_ms: self.wal_sync_ms + other.wal_sync_ms,
        }
    }
}

/// A table at the end of the run.
#[derive(Debug, Clone)]
pub struct TableStats {
    /// The scenario whose database it is in.
    pub scenario: String,
    /// The table.
    pub table: String,
    /// Rows in it.
    pub rows: i64,
    /// `n_tup_ins`.
    pub inserted: i64,
    /// `n_tup_upd`.
    pub updated: i64,
    /// `n_tup_hot_upd`: updates that wrote no index entry.
    pub hot_updated: i64,
    /// The table with its indexes and TOAST, in bytes.
    pub total_bytes: i64,
    /// The table's heap alone, in bytes.
    pub heap_bytes: i64,
    /// Its indexes.
    pub indexes: i64,
    /// `seq_scan`: scans of the whole table.
    pub seq_scans: i64,
    /// `seq_tup_read`: rows those scans read.
    pub seq_rows_read: i64,
    /// `idx_scan`.
    pub index_scans: i64,
}
