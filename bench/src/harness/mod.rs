//! What every scenario shares, below all of them: the run's options, starting the servers
//! ([`servers`], [`postgres`], [`peer`]), the HTTP/1 client ([`client`]), the closed-loop load
//! generator and its rounds ([`load`], [`operation`]), and measuring ([`cpu`], the servers' memory, the disk's
//! fsync rate). A scenario imports the harness, never another scenario; the report and the run
//! (the crate root) sit above them all.

pub mod client;
pub mod cpu;
pub mod durable;
pub mod load;
pub mod operation;
pub mod peer;
pub mod postgres;
pub mod servers;
pub mod webhook;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use postgres::PgOptions;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `toolgate` binary to measure.
    pub toolgate: PathBuf,
    /// How the bare axum ceiling runs.
    pub bare: BareMode,
    /// Where data directories go (the disk measured is this one's).
    pub data_root: PathBuf,
    /// Measuring time per scenario per round.
    pub duration: Duration,
    /// Unmeasured load before each measurement.
    pub warmup: Duration,
    /// Rounds; scenarios are interleaved within each.
    pub rounds: usize,
    /// Concurrent keep-alive connections.
    pub connections: usize,
    /// Whether to try the Python peer.
    pub peer: bool,
    /// Calls and pending approvals to seed for the scale scenarios; `None` skips them.
    pub scale: Option<(u64, u64)>,
    /// Start-ups to time.
    pub startups: usize,
    /// The PostgreSQL scenarios' settings; `None` skips them.
    pub postgres: Option<PgOptions>,
    /// The sizes of the waiting scenarios (wake-ups, held requests, webhook deliveries).
    pub waiting: WaitOptions,
}

/// How the bare ceiling server runs.
#[derive(Debug, Clone)]
pub enum BareMode {
    /// As a child process running this executable with `bare-server` (its RSS is its own).
    Process(PathBuf),
    /// On a task of the harness (for smoke runs, where there is no harness binary).
    InProcess,
}

/// The sizes of the waiting scenarios; 0 skips one.
#[derive(Debug, Clone, Copy)]
pub struct WaitOptions {
    /// Wake-up samples of each variant.
    pub wake_samples: usize,
    /// The period of the polling client of the wake-up baseline.
    pub poll_every: Duration,
    /// Requests held at once for the memory figure.
    pub held: usize,
    /// Feed entries whose webhook deliveries are timed, per round and mode.
    pub deliveries: usize,
}

impl WaitOptions {
    /// The full run's: 500 wake-ups, a poll every 100 ms, 10,000 held requests, 10,000
    /// deliveries.
    pub fn full() -> Self {
        WaitOptions {
            wake_samples: 500,
            poll_every: Duration::from_millis(100),
            held: 10_000,
            deliveries: 10_000,
        }
    }

    /// A smoke run's: a few of each.
    pub fn smoke() -> Self {
        WaitOptions {
            wake_samples: 20,
            held: 100,
            deliveries: 200,
            ..WaitOptions::full()
        }
    }
}

/// fsync()s per second: appends of 512 bytes, each followed by `fdatasync`, for `duration`, on
/// a file in `dir`. SQLite in WAL mode with `synchronous=FULL` pays one such sync per commit.
pub fn disk_fsyncs_per_s(dir: &Path, duration: Duration) -> std::io::Result<f64> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = [7u8; 512];
    let start = Instant::now();
    let mut syncs = 0u64;
    while start.elapsed() < duration {
        file.write_all(&block)?;
        file.sync_data()?;
        syncs += 1;
    }
    let rate = syncs as f64 / start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(rate)
}

/// A duration in `[0, bound)`, from the clock's nanoseconds (no generator needed for this).
pub(crate) fn random_below(bound: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let bound_ns = bound.as_nanos().max(1);
    // Spread over the bound by a multiplicative hash of the nanoseconds.
    let spread = (u128::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15)) % bound_ns;
    Duration::from_nanos(u64::try_from(spread).unwrap_or(0))
}
