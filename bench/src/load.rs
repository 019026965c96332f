//! The closed-loop load generator and the scenarios it runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

use crate::Options;

/// One kind of load, named as it is reported.
#[derive(Debug, Clone, Copy)]
pub enum Scenario {
    /// `GET /tools`.
    Tools(&'static str),
    /// `POST /tools/echo/call`.
    Echo(&'static str),
    /// `POST /recorded/tools/echo/call` on the bare server: its echo plus a row per call.
    RecordedEcho(&'static str),
    /// `POST /tools/send_email/call` with a fresh `Idempotency-Key` each: the durable write.
    Write(&'static str),
    /// `ask_human` suspends, then its token is approved: one cycle is one operation.
    SuspendApprove(&'static str),
    /// `POST /echo` on mcpo.
    PeerEcho(&'static str),
    /// `GET /approvals?limit=50`.
    Approvals(&'static str),
}

impl Scenario {
    /// The name reported.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Tools(n)
            | Scenario::Echo(n)
            | Scenario::RecordedEcho(n)
            | Scenario::Write(n)
            | Scenario::SuspendApprove(n)
            | Scenario::PeerEcho(n)
            | Scenario::Approvals(n) => n,
        }
    }
}

/// One measurement.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    /// The scenario.
    pub name: String,
    /// Operations completed with the expected answer.
    pub requests: u64,
    /// Operations that failed (a wrong status, a broken connection).
    pub errors: u64,
    /// Operations per second.
    pub rps: f64,
    /// Median operation latency.
    pub p50: Duration,
    /// 99th percentile operation latency.
    pub p99: Duration,
    /// The server's peak resident memory so far, in KiB.
    pub peak_rss_kib: Option<u64>,
}

const ECHO_BODY: &str = r#"{"input":{"text":"hello, tools"}}"#;
const EMAIL_BODY: &str =
    r#"{"input":{"to":"bench@example.com","subject":"load","body":"one of many"}}"#;
const ASK_BODY: &str = r#"{"input":{"question":"ship it?"}}"#;
const ANSWER_BODY: &str = r#"{"input":{"answer":"yes"}}"#;
const PEER_BODY: &str = r#"{"text":"hello, tools"}"#;

/// A unique suffix for idempotency keys across runs and connections.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    method: Method,
    path: &str,
    key: Option<&str>,
    body: &'static str,
) -> Result<(StatusCode, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1");
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// GETs `path` once and returns the body.
pub async fn fetch(addr: SocketAddr, path: &str) -> Result<Bytes, String> {
    let mut sender = connect(addr).await?;
    match send(&mut sender, Method::GET, path, None, "").await? {
        (StatusCode::OK, body) => Ok(body),
        (status, body) => Err(format!(
            "GET {path}: {status} {}",
            String::from_utf8_lossy(&body)
        )),
    }
}

/// The suspension token in a `202` body.
fn token(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("\"token\":\"")? + 9;
    let end = start + text[start..].find('"')?;
    Some(text[start..end].to_owned())
}

/// One operation of `scenario`; `Ok(true)` when every answer was the expected one.
async fn operate(
    scenario: Scenario,
    sender: &mut SendRequest<Full<Bytes>>,
) -> Result<bool, String> {
    let ok = |(status, _): (StatusCode, Bytes), want: StatusCode| status == want;
    Ok(match scenario {
        Scenario::Tools(_) => ok(
            send(sender, Method::GET, "/tools", None, "").await?,
            StatusCode::OK,
        ),
        Scenario::Approvals(_) => ok(
            send(sender, Method::GET, "/approvals?limit=50", None, "").await?,
            StatusCode::OK,
        ),
        Scenario::Echo(_) => ok(
            send(sender, Method::POST, "/tools/echo/call", None, ECHO_BODY).await?,
            StatusCode::OK,
        ),
        Scenario::RecordedEcho(_) => ok(
            send(
                sender,
                Method::POST,
                "/recorded/tools/echo/call",
                None,
                ECHO_BODY,
            )
            .await?,
            StatusCode::OK,
        ),
        Scenario::PeerEcho(_) => ok(
            send(sender, Method::POST, "/echo", None, PEER_BODY).await?,
            StatusCode::OK,
        ),
        Scenario::Write(_) => {
            let key = format!(
                "bench-{}-{}",
                std::process::id(),
                NEXT_KEY.fetch_add(1, Ordering::Relaxed)
            );
            ok(
                send(
                    sender,
                    Method::POST,
                    "/tools/send_email/call",
                    Some(&key),
                    EMAIL_BODY,
                )
                .await?,
                StatusCode::OK,
            )
        }
        Scenario::SuspendApprove(_) => {
            let (status, body) = send(
                sender,
                Method::POST,
                "/tools/ask_human/call",
                None,
                ASK_BODY,
            )
            .await?;
            match (status, token(&body)) {
                (StatusCode::ACCEPTED, Some(token)) => {
                    let path = format!("/approvals/{token}/approve");
                    ok(
                        send(sender, Method::POST, &path, None, ANSWER_BODY).await?,
                        StatusCode::OK,
                    )
                }
                _ => false,
            }
        }
    })
}

/// What one connection measured.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
}

/// Runs `scenario` against `addr` on `connections` connections until `until`, measuring only
/// from `from`.
async fn drive(
    scenario: Scenario,
    addr: SocketAddr,
    connections: usize,
    from: Instant,
    until: Instant,
) -> Tally {
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut sender = None;
                while Instant::now() < until {
                    if sender.is_none() {
                        match connect(addr).await {
                            Ok(s) => sender = Some(s),
                            Err(_) => {
                                tally.errors += 1;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        }
                    }
                    let started = Instant::now();
                    let result = operate(scenario, sender.as_mut().expect("connected")).await;
                    let measured = started >= from;
                    match result {
                        Ok(true) if measured => tally
                            .latencies_us
                            .push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX)),
                        Ok(true) => {}
                        Ok(false) => tally.errors += u64::from(measured),
                        Err(_) => {
                            tally.errors += u64::from(measured);
                            sender = None;
                        }
                    }
                }
                tally
            })
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        if let Ok(tally) = task.await {
            total.latencies_us.extend(tally.latencies_us);
            total.errors += tally.errors;
        }
    }
    total
}

/// Peak resident memory of process `pid`, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM:")
}

/// Resident memory of process `pid` now, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:")
}

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|line| line.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Runs every scenario of `plan`, `options.rounds` times interleaved, and keeps each one's best
/// round (the least disturbed by the machine's noise).
pub async fn run_rounds(
    plan: &[(Scenario, SocketAddr, Option<u32>)],
    options: &Options,
) -> Result<Vec<ScenarioResult>, String> {
    let mut best: Vec<Option<ScenarioResult>> = vec![None; plan.len()];
    for round in 1..=options.rounds {
        for (index, (scenario, addr, pid)) in plan.iter().enumerate() {
            let from = Instant::now() + options.warmup;
            let until = from + options.duration;
            let tally = drive(*scenario, *addr, options.connections, from, until).await;
            let result = summarize(
                scenario.name(),
                tally,
                options.duration,
                pid.and_then(peak_rss_kib),
            );
            eprintln!(
                "round {round} {:<18} {:>9.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}",
                result.name,
                result.rps,
                result.p50.as_secs_f64() * 1e3,
                result.p99.as_secs_f64() * 1e3,
                result.errors
            );
            let slot = &mut best[index];
            let keep = match slot {
                Some(previous) => result.rps > previous.rps,
                None => true,
            };
            if keep {
                // Errors of every round count: a clean best round must not hide a bad one.
                let errors = slot.as_ref().map_or(0, |p| p.errors);
                *slot = Some(ScenarioResult {
                    errors: result.errors + errors,
                    ..result
                });
            } else if let Some(previous) = slot {
                previous.errors += result.errors;
                previous.peak_rss_kib = result.peak_rss_kib.max(previous.peak_rss_kib);
            }
        }
    }
    Ok(best.into_iter().flatten().collect())
}

fn summarize(
    name: &str,
    mut tally: Tally,
    duration: Duration,
    peak: Option<u64>,
) -> ScenarioResult {
    tally.latencies_us.sort_unstable();
    let at = |q: f64| {
        let n = tally.latencies_us.len();
        if n == 0 {
            return Duration::ZERO;
        }
        let index = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
        Duration::from_micros(u64::from(tally.latencies_us[index]))
    };
    ScenarioResult {
        name: name.to_owned(),
        requests: tally.latencies_us.len() as u64,
        errors: tally.errors,
        rps: tally.latencies_us.len() as f64 / duration.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        peak_rss_kib: peak,
    }
}
