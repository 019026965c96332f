//! Faults at random, the short run (issue 38): the real binary, one process on SQLite or three
//! replicas on one PostgreSQL database, clients recording every request and answer, and faults
//! from a seeded schedule (`kill -9` and a restart of a process, `SIGSTOP` then `SIGCONT`, on
//! PostgreSQL a replica's connection to the database cut through a proxy, a stop or a cut
//! sometimes past the lease: a zombie whose calls the others settle); then the checker
//! ([`checker`]) reads the history, the database and the tools' ledger (the example
//! `send_email`'s outbox, where each effect is a line naming its call) and fails naming the
//! first promise broken.
//!
//! On each backend, a fixed seed and a random one, printed. `TOOLGATE_CHAOS_SEED` repeats a
//! run and `TOOLGATE_CHAOS_SECONDS` sets each run's length (8 s by default). A failure names its
//! seed and the file the history was written to.

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod client;
mod disk;
mod full_disk;
mod proxy;
mod stream;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::{Backend, Binary, Location, Site};

/// What each run's server is told: `send_email` waits a little before it sends, so that faults
/// land in the middle of writes.
const SERVER_ENV: &[(&str, &str)] = &[("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "40")];

/// Clients driving calls at once.
const CLIENTS: usize = 4;

/// The approval policies of the run: an email whose subject is `gated` waits for a person, and
/// a suspension of either tool left undecided for a second is escalated (once).
const POLICIES: &str = r#"
[tools.send_email.approval]
when = "input.subject == 'gated'"
escalate_after_s = 1

[tools.ask_human.approval]
when = "false"
escalate_after_s = 1
"#;

/// The command that restarts the PostgreSQL server, when the run may (`bench/chaos` names it:
/// the server is shared by the whole test suite, so the suite's short run never restarts it).
const RESTART_POSTGRES: &str = "TOOLGATE_CHAOS_RESTART_POSTGRES";

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

/// One process: its data directory (its outbox), the process while it runs, and its address
/// while it answers.
struct Process {
    dir: std::path::PathBuf,
    /// On PostgreSQL: its way to the database, through a proxy the run can cut.
    database: Option<(String, proxy::Proxy)>,
    binary: Mutex<Option<Binary>>,
    base: RwLock<Option<String>>,
}

/// Where a process keeps what it records: its data directory, and the shared database.
pub struct Place<'a> {
    dir: &'a std::path::Path,
    url: Option<&'a str>,
}

impl Site for Place<'_> {
    fn data_dir(&self) -> &std::path::Path {
        self.dir
    }

    fn database_url(&self) -> Option<&str> {
        self.url
    }
}

/// The server under test: one process on SQLite, or three replicas on PostgreSQL, each with a
/// data directory of its own.
pub struct Server {
    /// On SQLite, where the machine allows: the data directory's file system, which a fault
    /// fills (dropped before `at`, so that it is unmounted before its directory is removed).
    disk: Option<disk::Disk>,
    at: Location,
    /// The webhook receiver every process sends the feed to, and their configuration file.
    hooks: common::receiver::Receiver,
    config: std::path::PathBuf,
    /// The replicas' data directories (on SQLite, the one process's is `at`'s).
    _dirs: Vec<tempfile::TempDir>,
    processes: Vec<Process>,
    started: Instant,
    /// The errors the processes logged, gathered as each ends (see [`Server::keep_errors`]).
    errors: Mutex<Vec<String>>,
}

impl Server {
    async fn new(backend: Backend) -> Self {
        let at = Location::new(backend).await;
        let disk = match backend {
            Backend::Sqlite => disk::Disk::mount(at.data_dir()),
            Backend::Postgres => None,
        };
        let (hooks, webhook) = common::receiver::Receiver::start("").await;
        let config = at.data_dir().join("chaos.toml");
        std::fs::write(&config, format!("{webhook}\n{POLICIES}")).unwrap();
        let dirs: Vec<tempfile::TempDir> = match backend {
            Backend::Sqlite => Vec::new(),
            Backend::Postgres => (0..3).map(|_| common::temp_dir()).collect(),
        };
        let mut paths: Vec<std::path::PathBuf> =
            dirs.iter().map(|dir| dir.path().to_owned()).collect();
        if paths.is_empty() {
            paths.push(at.data_dir().to_owned());
        }
        let mut processes = Vec::new();
        for dir in paths {
            let database = match at.database_url() {
                Some(url) => {
                    let mut url = url::Url::parse(url).unwrap();
                    let host = url.host_str().unwrap().to_owned();
                    let upstream = tokio::net::lookup_host((host, url.port().unwrap_or(5432)))
                        .await
                        .unwrap()
                        .next()
                        .unwrap();
                    let proxy = proxy::Proxy::start(upstream).await;
                    url.set_host(Some("127.0.0.1")).unwrap();
                    url.set_port(Some(proxy.port)).unwrap();
                    Some((url.to_string(), proxy))
                }
                None => None,
            };
            processes.push(Process {
                dir,
                database,
                binary: Mutex::new(None),
                base: RwLock::new(None),
            });
        }
        Server {
            disk,
            at,
            hooks,
            config,
            _dirs: dirs,
            processes,
            started: Instant::now(),
            errors: Mutex::default(),
        }
    }

    /// Milliseconds since the run began: the one clock of the history.
    pub fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The address of a process that answers now, `rng`'s choice; `None` while none does.
    pub fn base(&self, rng: &mut Rng) -> Option<String> {
        let up: Vec<String> = self
            .processes
            .iter()
            .filter_map(|p| p.base.read().unwrap().clone())
            .collect();
        if up.is_empty() {
            return None;
        }
        Some(up[rng.between(0, up.len() as u64) as usize].clone())
    }

    /// The data directories of every process, each with the database: where their outboxes are.
    pub fn places(&self) -> impl Iterator<Item = Place<'_>> {
        self.processes.iter().map(|p| Place {
            dir: &p.dir,
            url: self.at.database_url(),
        })
    }

    fn start(&self, n: usize) {
        let process = &self.processes[n];
        let place = Place {
            dir: &process.dir,
            url: process.database.as_ref().map(|(url, _)| url.as_str()),
        };
        let config = ["--config", self.config.to_str().unwrap()];
        let binary = Binary::start_with(&place, &config, SERVER_ENV);
        *process.base.write().unwrap() = Some(binary.api.base.clone());
        *process.binary.lock().unwrap() = Some(binary);
    }

    fn kill(&self, n: usize) {
        let process = &self.processes[n];
        *process.base.write().unwrap() = None;
        if let Some(binary) = process.binary.lock().unwrap().take() {
            let log = binary.log();
            binary.kill();
            self.keep_errors(&log);
        }
    }

    /// Keeps the errors a process logged (those of a full disk, one per failed batch, only
    /// counted), for whoever reads a failure.
    fn keep_errors(&self, log: &[String]) {
        let full = log.iter().filter(|l| l.contains("disk is full")).count();
        let mut errors = self.errors.lock().unwrap();
        errors.push(format!(
            "-- {} ms: a process ended; {full} lines of a full disk",
            self.now()
        ));
        errors.extend(
            log.iter()
                .filter(|l| l.contains("ERROR") && !l.contains("disk is full"))
                .cloned(),
        );
    }

    fn signal(&self, n: usize, signal: &str) {
        if let Some(binary) = self.processes[n].binary.lock().unwrap().as_ref() {
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
    /// How long the process was gone or stopped.
    pub for_ms: u64,
    pub kind: &'static str,
    /// Which process, and its address before the fault.
    pub process: usize,
    pub base: String,
}

/// Injects faults until `deadline`, each on one process: a `kill -9` and a restart (after a
/// pause), a `SIGSTOP` and a `SIGCONT`, on PostgreSQL its connection to the database cut and
/// restored (with replicas, a stop or a cut sometimes outlasts the lease) and, now and then when
/// `bench/chaos` allows it, the database server restarted; on SQLite, its disk filled for a
/// while where the machine lets the run mount one. Every process is up and connected, and the
/// disk has room, when it returns.
fn inject(server: &Server, mut rng: Rng, deadline: Instant) -> Vec<Fault> {
    let replicas = server.processes.len() as u64;
    // A replica stopped past its lease (1.5 s in the tests' environment) is a zombie: the
    // others settle its calls, and what it records when it wakes must be refused.
    let longest_stop = if replicas > 1 { 2500 } else { 400 };
    let restart_postgres = std::env::var(RESTART_POSTGRES)
        .ok()
        .filter(|_| server.at.database_url().is_some());
    let mut faults = Vec::new();
    loop {
        std::thread::sleep(Duration::from_millis(rng.between(300, 1200)));
        if Instant::now() >= deadline {
            return faults;
        }
        let process = rng.between(0, replicas) as usize;
        let base = server.processes[process].base.read().unwrap().clone();
        let at_ms = server.now();
        let roll = rng.between(0, 20);
        let proxy = server.processes[process].database.as_ref().map(|(_, p)| p);
        let kind = if let (19, Some(command)) = (roll, &restart_postgres) {
            let status = std::process::Command::new("sh")
                .args(["-c", command])
                .status()
                .unwrap();
            assert!(status.success(), "{command}");
            "PostgreSQL restarted"
        } else if let (true, Some(proxy)) = (roll >= 16, proxy) {
            proxy.cut();
            std::thread::sleep(Duration::from_millis(rng.between(100, longest_stop)));
            proxy.restore();
            "cut from the database"
        } else if let (true, Some(disk)) = (roll >= 16, &server.disk) {
            disk.fill();
            std::thread::sleep(Duration::from_millis(rng.between(100, 1500)));
            disk.free();
            "disk full"
        } else if roll < 11 {
            server.kill(process);
            std::thread::sleep(Duration::from_millis(rng.between(0, 400)));
            server.start(process);
            "kill -9"
        } else {
            server.signal(process, "-STOP");
            std::thread::sleep(Duration::from_millis(rng.between(100, longest_stop)));
            server.signal(process, "-CONT");
            "SIGSTOP"
        };
        faults.push(Fault {
            at_ms,
            for_ms: server.now() - at_ms,
            kind,
            process,
            base: base.unwrap_or_default(),
        });
    }
}

/// Runs `work` on a blocking thread (starting and killing processes waits on them).
async fn blocking(server: &Arc<Server>, work: impl FnOnce(&Server) + Send + 'static) {
    let server = server.clone();
    tokio::task::spawn_blocking(move || work(&server))
        .await
        .unwrap();
}

/// One run on `backend`: the clients and the faults for `seconds`, then the checker. Panics
/// naming the seed and the history's file when a promise is broken.
async fn run(backend: Backend, seed: u64, seconds: u64) {
    eprintln!(
        "chaos on {backend:?}: seed {seed}, {seconds} s (TOOLGATE_CHAOS_SEED={seed} repeats it)"
    );
    let server = Arc::new(Server::new(backend).await);
    blocking(&server, |server| {
        (0..server.processes.len()).for_each(|n| server.start(n));
    })
    .await;
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let history = Arc::new(Mutex::new(Vec::new()));
    let deferred = client::Deferred::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let (server, history) = (server.clone(), history.clone());
            let rng = Rng::new(rng.draw());
            let deferred = deferred.clone();
            tokio::spawn(client::drive(n, server, rng, deadline, history, deferred))
        })
        .collect();
    // The stream's reader goes on a little past the faults, so that it reads what they left.
    let follower = {
        let (server, rng) = (server.clone(), Rng::new(rng.draw()));
        let until = deadline + Duration::from_secs(2);
        tokio::spawn(async move { stream::follow(&server, rng, until).await })
    };
    let faulty = server.clone();
    let fault_rng = Rng::new(rng.draw());
    let faults = tokio::task::spawn_blocking(move || inject(&faulty, fault_rng, deadline))
        .await
        .unwrap();
    for client in clients {
        client.await.unwrap();
    }
    let seen = follower.await.unwrap();
    // A last crash, so that whatever ran on that process at the end is settled as a crash
    // settles it: by its restart on SQLite, by the other replicas' sweep on PostgreSQL.
    blocking(&server, |server| {
        server.kill(0);
        server.start(0);
    })
    .await;
    let history = history.lock().unwrap().clone();
    let file = server.at.data_dir().join("history.jsonl");
    client::save(&history, &faults, &file);
    // Kept for whoever reads a failure, or asks (`TOOLGATE_CHAOS_KEEP`).
    let kept = std::env::temp_dir().join(format!("toolgate-chaos-{seed}.jsonl"));
    let keep = || {
        std::fs::copy(&file, &kept).unwrap();
        let errors = server.errors.lock().unwrap().join("\n");
        std::fs::write(kept.with_extension("log"), errors).unwrap();
    };
    if std::env::var_os("TOOLGATE_CHAOS_KEEP").is_some() {
        keep();
        eprintln!(
            "chaos on {backend:?}: the history is kept in {}",
            kept.display()
        );
    }
    match checker::check(&server, &history, &faults, &seen).await {
        Ok(summary) => eprintln!("chaos on {backend:?}: seed {seed}: {summary}"),
        Err(violation) => {
            keep();
            panic!(
                "chaos on {backend:?}: seed {seed}: {violation}\nthe history: {} \
                 (TOOLGATE_CHAOS_SEED={seed} repeats the run)",
                kept.display()
            );
        }
    }
    blocking(&server, |server| {
        (0..server.processes.len()).for_each(|n| server.kill(n));
    })
    .await;
}

fn seconds() -> u64 {
    std::env::var("TOOLGATE_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

/// The seed `TOOLGATE_CHAOS_SEED` names; else `fixed`, or (`None`) one from the clock.
fn seed(fixed: Option<u64>) -> u64 {
    let named = std::env::var("TOOLGATE_CHAOS_SEED").ok();
    named
        .and_then(|s| s.parse().ok())
        .or(fixed)
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

async fn a_fixed_seed_keeps_every_promise_through_kills_and_stops(backend: Backend) {
    run(backend, seed(Some(38)), seconds()).await;
}

async fn a_random_seed_keeps_every_promise_through_kills_and_stops(backend: Backend) {
    if std::env::var_os("TOOLGATE_CHAOS_SEED").is_some() {
        return;
    }
    run(backend, seed(None), seconds()).await;
}

on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fixed_seed_keeps_every_promise_through_kills_and_stops;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_random_seed_keeps_every_promise_through_kills_and_stops;
}
