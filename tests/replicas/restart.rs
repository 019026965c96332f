//! A database that stops and comes back under load: every replica answers `503
//! store_unavailable` meanwhile, never a hang or a 500, and loses nothing that was acknowledged.

use super::*;

/// A PostgreSQL cluster of the test's own, in a temporary directory, on a free port; stopped
/// when dropped, a failing test included (its server log is printed then).
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// Running as root: PostgreSQL's programs refuse root, so they run as `postgres`.
    as_postgres: bool,
}

impl Cluster {
    fn init() -> Cluster {
        let dir = temp_dir();
        let as_postgres = output(Command::new("id").arg("-u")).trim() == "0";
        if as_postgres {
            output(
                Command::new("chown")
                    .arg("-R")
                    .arg("postgres")
                    .arg(dir.path()),
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let cluster = Cluster {
            dir,
            bin: postgres_bin(),
            port,
            as_postgres,
        };
        cluster.run(
            "initdb",
            &["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"],
        );
        cluster.start();
        cluster
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn start(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {}",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-w",
                "-t",
                "60",
                "-l",
                log.to_str().unwrap(),
                "-o",
                &options,
                "start",
            ],
        );
    }

    fn stop(&self, mode: &str) {
        self.run("pg_ctl", &["-w", "-t", "60", "-m", mode, "stop"]);
    }

    /// Runs one of PostgreSQL's programs on the cluster's data directory, and checks it worked.
    fn run(&self, program: &str, args: &[&str]) {
        output(&mut self.command(program, args));
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join(program));
            command
        } else {
            Command::new(self.bin.join(program))
        };
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(args)
            .current_dir(self.dir.path());
        command
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("server.log"));
            eprintln!("----- PostgreSQL log -----\n{}", log.unwrap_or_default());
        }
        // Not checked: a second panic while unwinding would abort the whole test binary.
        let _ = self
            .command("pg_ctl", &["-w", "-t", "60", "-m", "immediate", "stop"])
            .output();
    }
}

/// What `command` printed, once it succeeded.
fn output(command: &mut Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        status.success(),
        "{command:?} failed ({status}): {}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    String::from_utf8_lossy(&stdout).into_owned()
}

/// The newest `/usr/lib/postgresql/<version>/bin` with an `initdb`.
fn postgres_bin() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    std::fs::read_dir(root)
        .unwrap_or_else(|err| panic!("PostgreSQL's programs are not in {}: {err}", root.display()))
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| panic!("no {}/<version>/bin/initdb", root.display()))
}

/// The tools of the steady load, each with what it answers when it succeeds and the status its
/// record then has.
const LOAD: [(&str, StatusCode, &str); 3] = [
    ("echo", StatusCode::OK, "completed"),
    ("send_email", StatusCode::OK, "completed"),
    ("ask_human", StatusCode::ACCEPTED, "suspended"),
];

/// The database is up, down (stopped and not yet restarting), or restarting and after.
const UP: u8 = 0;
const DOWN: u8 = 1;
const BACK: u8 = 2;

/// One request of the load.
struct Sample {
    tool: &'static str,
    replica: usize,
    /// Sent and answered while the database was down.
    while_down: bool,
    answer: Result<Answer, String>,
}

/// One request of `tool`, told apart by `tag`: echo and ask_human plain, send_email under a
/// fresh key.
async fn request(api: &Api, tool: &'static str, tag: &str) -> Result<Answer, String> {
    let (key, input) = match tool {
        "echo" => (None, json!({"text": tag})),
        "send_email" => (Some(format!("mail-{tag}")), email(tag)),
        _ => (None, json!({"question": tag})),
    };
    call(api, tool, key.as_deref(), &input)
        .await
        .map_err(|err| format!("{tool} {tag}: no answer: {err}"))
}

/// What is wrong with `answer` to `tool`, if anything: it must be the tool's success, or `503
/// store_unavailable` with `Retry-After`.
fn wrong(tool: &str, answer: &Result<Answer, String>) -> Option<String> {
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => return Some(err.clone()),
    };
    let succeeded = LOAD
        .iter()
        .any(|(t, ok, _)| *t == tool && *ok == answer.status);
    let unavailable = answer.status == StatusCode::SERVICE_UNAVAILABLE
        && answer.body["error"]["code"] == "store_unavailable"
        && answer
            .retry_after
            .as_deref()
            .is_some_and(|s| s.parse::<u64>().is_ok());
    (!succeeded && !unavailable).then(|| format!("{tool}: {answer:?}"))
}

/// Sends `tool` to `api` over and over until `stop`, noting when the database was down.
async fn steady_load(
    api: Api,
    replica: usize,
    tool: &'static str,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let before = phase.load(Ordering::SeqCst);
        let answer = request(&api, tool, &format!("load-{replica}-{n}")).await;
        let while_down = before == DOWN && phase.load(Ordering::SeqCst) == DOWN;
        samples.push(Sample {
            tool,
            replica,
            while_down,
            answer,
        });
        tokio::time::sleep(POLL).await;
    }
    samples
}

/// The status `/readyz` of `api` answers, with the error code when it is not ready.
async fn readiness(api: &Api) -> (StatusCode, Value) {
    let answer = send(api.client.get(format!("{}/readyz", api.base)))
        .await
        .unwrap_or_else(|err| panic!("/readyz at {} did not answer: {err}", api.base));
    (answer.status, answer.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_under_load_is_answered_503_and_loses_no_acknowledged_call() {
    let cluster = tokio::task::block_in_place(Cluster::init);
    let replicas = start_replicas(&cluster.url(), 2, &[], &[(SEND_EMAIL_DELAY, "200")]).await;
    let phase = Arc::new(AtomicU8::new(UP));
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = replicas
        .iter()
        .enumerate()
        .flat_map(|(index, replica)| {
            let (phase, stop) = (&phase, &stop);
            LOAD.iter().map(move |(tool, _, _)| {
                tokio::spawn(steady_load(
                    replica.api.clone(),
                    index,
                    tool,
                    phase.clone(),
                    stop.clone(),
                ))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    tokio::task::block_in_place(|| cluster.stop("fast"));
    phase.store(DOWN, Ordering::SeqCst);
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(3) {
        for replica in &replicas {
            let (status, body) = readiness(&replica.api).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert_error(&body, "not_ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    phase.store(BACK, Ordering::SeqCst);
    tokio::task::block_in_place(|| cluster.start());
    let restarted = Instant::now();
    for replica in &replicas {
        eventually("ready again", DEADLINE, async || {
            (readiness(&replica.api).await.0 == StatusCode::OK).then_some(())
        })
        .await;
    }
    println!(
        "ready again {} ms after the restart",
        restarted.elapsed().as_millis()
    );
    // Back by itself: once ready, every tool succeeds on every replica.
    let mut samples = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        for (tool, ok, _) in LOAD {
            let answer = request(&replica.api, tool, &format!("back-{index}")).await;
            assert_eq!(
                answer.as_ref().map(|a| a.status).ok(),
                Some(ok),
                "{tool} on {} once ready: {answer:?}",
                replica.name
            );
            samples.push(Sample {
                tool,
                replica: index,
                while_down: false,
                answer,
            });
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    for worker in load {
        samples.extend(worker.await.unwrap());
    }

    // Never a hang, never a 500: the tool's success or 503 store_unavailable.
    let wrong_answers: Vec<String> = samples
        .iter()
        .filter_map(|s| wrong(s.tool, &s.answer))
        .collect();
    assert!(
        wrong_answers.is_empty(),
        "{} wrong answers of {}: {:#?}",
        wrong_answers.len(),
        samples.len(),
        &wrong_answers[..wrong_answers.len().min(20)]
    );
    // With the database down, nothing that needs it succeeded.
    let count = |tool: &str, status: StatusCode, while_down: bool| {
        samples
            .iter()
            .filter(|s| s.tool == tool && (!while_down || s.while_down))
            .filter(|s| s.answer.as_ref().is_ok_and(|a| a.status == status))
            .count()
    };
    for (tool, ok, _) in &LOAD[1..] {
        assert_eq!(
            count(tool, *ok, true),
            0,
            "{tool} succeeded with no database"
        );
    }
    let unavailable: usize = LOAD
        .iter()
        .map(|(tool, _, _)| count(tool, StatusCode::SERVICE_UNAVAILABLE, false))
        .sum();
    println!(
        "{} requests: {unavailable} answered 503 store_unavailable; while down, echo answered \
         200 {} times and 503 {} times",
        samples.len(),
        count("echo", StatusCode::OK, true),
        count("echo", StatusCode::SERVICE_UNAVAILABLE, true)
    );
    assert!(unavailable > 0, "the outage was felt");

    // Nothing acknowledged is lost: every call answered 200/202 can be read, as answered, on
    // the other replica (read records are written behind: given a moment).
    let mut sent = Vec::new();
    for sample in &samples {
        let Ok(answer) = &sample.answer else { continue };
        let Some((_, _, status)) = LOAD
            .iter()
            .find(|(tool, ok, _)| *tool == sample.tool && *ok == answer.status)
        else {
            continue;
        };
        let call_id = answer.body["call_id"].as_str().expect("a call id");
        let other = &replicas[(sample.replica + 1) % replicas.len()];
        eventually(
            &format!("acknowledged call {call_id} readable as {status}"),
            DEADLINE,
            async || {
                let (found, body) = other.api.get(&format!("/calls/{call_id}")).await;
                (found == StatusCode::OK && body["status"] == *status).then_some(())
            },
        )
        .await;
        if sample.tool == "send_email" {
            sent.push(call_id.to_owned());
        }
    }
    // Each email that was acknowledged went out once; none went out twice.
    let mut lines: HashMap<String, usize> = HashMap::new();
    for line in all_outboxes(&replicas) {
        *lines
            .entry(line["call_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for call_id in &sent {
        assert_eq!(lines.get(call_id), Some(&1), "the email of {call_id}");
    }
    assert!(
        lines.values().all(|&n| n == 1),
        "an email sent twice: {lines:?}"
    );
    // An email sent while its outcome could not be recorded is recorded once the store is back.
    for call_id in lines.keys() {
        record_in(&replicas[0].api, call_id, "completed").await;
    }
}
