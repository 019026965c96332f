//! Faults at random, the short run (issue 38): one toolgate process on SQLite, the real binary,
//! clients recording every request and answer, and faults from a seeded schedule (`kill -9`
//! and a restart, `SIGSTOP` then `SIGCONT`); then the checker ([`checker`]) reads the history,
//! the database and the tools' ledger (the example `send_email`'s outbox, where each effect is a
//! line naming its call) and fails naming the first promise broken.
//!
//! Two runs: a fixed seed, and a random one, printed. `TOOLGATE_CHAOS_SEED` repeats a run and
//! `TOOLGATE_CHAOS_SECONDS` sets each run's length (8 s by default). A failure names its seed
//! and the file the history was written to.

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod client;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::{Backend, Binary, Location, Site};

/// What each run's server is told: `send_email` waits a little before it sends, so that faults
/// land in the middle of writes.
const SERVER_ENV: &[(&str, &str)] = &[("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "40")];

/// Clients driving calls at once.
const CLIENTS: usize = 4;

/// A small, seeded generator (SplitMix64): a seed repeats a run's choices.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn draw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.draw() % (high - low)
    }
}

/// The server under test: its current process, and its address while it is up.
pub struct Server {
    at: Location,
    binary: Mutex<Option<Binary>>,
    base: RwLock<Option<String>>,
    started: Instant,
}

impl Server {
    /// Milliseconds since the run began: the one clock of the history.
    pub fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The address to send to, while the server is up.
    pub fn base(&self) -> Option<String> {
        self.base.read().unwrap().clone()
    }

    fn start(&self) {
        let binary = Binary::start(&self.at, SERVER_ENV);
        *self.base.write().unwrap() = Some(binary.api.base.clone());
        *self.binary.lock().unwrap() = Some(binary);
    }

    fn kill(&self) {
        *self.base.write().unwrap() = None;
        if let Some(binary) = self.binary.lock().unwrap().take() {
            binary.kill();
        }
    }

    fn signal(&self, signal: &str) {
        if let Some(binary) = self.binary.lock().unwrap().as_ref() {
            let status = std::process::Command::new("kill")
                .args([signal, &binary.pid().to_string()])
                .status()
                .unwrap();
            assert!(status.success(), "kill {signal}");
        }
    }
}

/// A fault the schedule injected, and when.
#[derive(Debug, Clone)]
pub struct Fault {
    pub at_ms: u64,
    /// How long the server was gone or stopped.
    pub for_ms: u64,
    pub kind: &'static str,
}

/// Injects faults until `deadline`: a `kill -9` and a restart (after a pause), or a `SIGSTOP`
/// and a `SIGCONT`; the server is up when it returns.
fn inject(server: &Server, mut rng: Rng, deadline: Instant) -> Vec<Fault> {
    let mut faults = Vec::new();
    loop {
        std::thread::sleep(Duration::from_millis(rng.between(300, 1200)));
        if Instant::now() >= deadline {
            return faults;
        }
        let at_ms = server.now();
        let pause = Duration::from_millis(rng.between(0, 400));
        let kind = if rng.between(0, 10) < 7 {
            server.kill();
            std::thread::sleep(pause);
            server.start();
            "kill -9"
        } else {
            server.signal("-STOP");
            std::thread::sleep(pause);
            server.signal("-CONT");
            "SIGSTOP"
        };
        faults.push(Fault {
            at_ms,
            for_ms: server.now() - at_ms,
            kind,
        });
    }
}

/// One run: the clients and the faults for `seconds`, then the checker. Panics naming the seed
/// and the history's file when a promise is broken.
async fn run(seed: u64, seconds: u64) {
    eprintln!("chaos: seed {seed}, {seconds} s (TOOLGATE_CHAOS_SEED={seed} repeats it)");
    let server = Arc::new(Server {
        at: Location::new(Backend::Sqlite).await,
        binary: Mutex::new(None),
        base: RwLock::new(None),
        started: Instant::now(),
    });
    let starting = server.clone();
    tokio::task::spawn_blocking(move || starting.start())
        .await
        .unwrap();
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let history = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let (server, history) = (server.clone(), history.clone());
            let rng = Rng::new(rng.draw());
            tokio::spawn(client::drive(n, server, rng, deadline, history))
        })
        .collect();
    let faulty = server.clone();
    let fault_rng = Rng::new(rng.draw());
    let faults = tokio::task::spawn_blocking(move || inject(&faulty, fault_rng, deadline))
        .await
        .unwrap();
    for client in clients {
        client.await.unwrap();
    }
    // A last crash, so that whatever ran at the end is settled as a restart settles it.
    let last = server.clone();
    tokio::task::spawn_blocking(move || {
        last.kill();
        last.start();
    })
    .await
    .unwrap();
    let history = history.lock().unwrap().clone();
    let file = server.at.data_dir().join("history.jsonl");
    client::save(&history, &faults, &file);
    let report = checker::check(&server, &history, &faults).await;
    match report {
        Ok(summary) => eprintln!("chaos: seed {seed}: {summary}"),
        Err(violation) => {
            // Kept for whoever reads the failure.
            let kept = std::env::temp_dir().join(format!("toolgate-chaos-{seed}.jsonl"));
            std::fs::copy(&file, &kept).unwrap();
            panic!(
                "chaos: seed {seed}: {violation}\nthe history: {} (TOOLGATE_CHAOS_SEED={seed} \
                 repeats the run)",
                kept.display()
            );
        }
    }
    let stopping = server.clone();
    tokio::task::spawn_blocking(move || stopping.kill())
        .await
        .unwrap();
}

fn seconds() -> u64 {
    std::env::var("TOOLGATE_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_seed_keeps_every_promise_through_kills_and_stops() {
    let seed = std::env::var("TOOLGATE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(38);
    run(seed, seconds()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_seed_keeps_every_promise_through_kills_and_stops() {
    if std::env::var_os("TOOLGATE_CHAOS_SEED").is_some() {
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    run(seed, seconds()).await;
}
