//! Wake-up latency: how soon a held request hears of a decision, on SQLite and across
//! PostgreSQL replicas, beside a plain poll and a polling client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};

use super::{HOLD, wait_for_waiters};
use crate::harness::client::{self, ANSWER_BODY, Sender, failed};
use crate::harness::postgres::{self, Admin};
use crate::harness::servers::sqlite_server;
use crate::harness::{Options, random_below};

/// How long the harness waits, once the server counts a held request, before it approves.
const SETTLE: Duration = Duration::from_millis(5);

/// Unmeasured samples of each wake-up variant first (the first wait also starts the server's
/// feed watcher).
const WAKE_WARMUP: usize = 5;

/// Quantiles of signed intervals, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    /// How many.
    pub samples: usize,
    /// The median.
    pub p50_us: i64,
    /// The 99th percentile.
    pub p99_us: i64,
    /// The least.
    pub min_us: i64,
    /// The most.
    pub max_us: i64,
}

impl Spread {
    fn of(mut values: Vec<i64>) -> Spread {
        values.sort_unstable();
        let n = values.len();
        if n == 0 {
            return Spread::default();
        }
        let at = |q: f64| values[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
        Spread {
            samples: n,
            p50_us: at(0.50),
            p99_us: at(0.99),
            min_us: values[0],
            max_us: values[n - 1],
        }
    }
}

/// `later - earlier` in µs, negative when `later` came first.
fn signed_us(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        None => -i64::try_from((earlier - later).as_micros()).unwrap_or(i64::MAX),
    }
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// What one wake-up variant measured.
#[derive(Debug, Clone)]
pub struct Wake {
    /// `wake`, `pg_wake` or `pg_wake_cross`.
    pub name: String,
    /// Samples measured (answered as expected).
    pub samples: u64,
    /// Samples that failed (a wrong status, a held answer that was not the completed call).
    pub errors: u64,
    /// Held requests answered `running` (read between the decision and the outcome) and sent
    /// again; the sample is timed to the answer of the last.
    pub asked_again: u64,
    /// From the approval's answer to the held answer.
    pub after_answer: Spread,
    /// From the approval's request to the held answer.
    pub after_start: Spread,
    /// The approval's round trip.
    pub approve: Spread,
    /// A plain `GET /calls/{id}` (one poll) on the holding server.
    pub get: Spread,
    /// The period of the polling baseline.
    pub poll_every: Duration,
    /// From the approval's answer to the answer of the first poll that saw the call completed.
    pub polled: Spread,
}

/// One wake-up variant: calls made and approved on `approver`, held and polled on `holder`.
struct Prober {
    name: &'static str,
    approver_addr: SocketAddr,
    holder: SocketAddr,
    approver: Sender,
    scrape: Sender,
    get: Sender,
    /// Lent to the task that holds (or polls) and given back after.
    hold: Option<Sender>,
    after_answer: Vec<i64>,
    after_start: Vec<i64>,
    approve: Vec<i64>,
    plain_get: Vec<i64>,
    polled: Vec<i64>,
    asked_again: u64,
    errors: u64,
}

impl Prober {
    async fn new(
        name: &'static str,
        approver: SocketAddr,
        holder: SocketAddr,
    ) -> Result<Self, String> {
        Ok(Prober {
            name,
            approver_addr: approver,
            holder,
            approver: client::connect(approver).await?,
            scrape: client::connect(holder).await?,
            get: client::connect(holder).await?,
            hold: None,
            after_answer: Vec::new(),
            after_start: Vec::new(),
            approve: Vec::new(),
            plain_get: Vec::new(),
            polled: Vec::new(),
            asked_again: 0,
            errors: 0,
        })
    }

    /// Approves `token`: when the approval was sent, and when its `200` had arrived.
    async fn approve(&mut self, token: &str) -> Result<(Instant, Instant), String> {
        let started = Instant::now();
        let (status, body) = client::send(
            &mut self.approver,
            Method::POST,
            &format!("/approvals/{token}/approve"),
            None,
            ANSWER_BODY,
        )
        .await?;
        let answered = Instant::now();
        if status != StatusCode::OK {
            return Err(format!(
                "the approval answered {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        Ok((started, answered))
    }

    async fn holding_connection(&mut self) -> Result<Sender, String> {
        match self.hold.take() {
            Some(sender) => Ok(sender),
            None => client::connect(self.holder).await,
        }
    }

    /// One held request woken by an approval; recorded when `measured`.
    async fn sample(&mut self, measured: bool) -> Result<(), String> {
        let (call_id, token) = client::suspend(&mut self.approver).await?;
        let path = format!("/calls/{call_id}");
        let started = Instant::now();
        let (status, _) = client::send(&mut self.get, Method::GET, &path, None, "").await?;
        let plain_get = started.elapsed();
        if status != StatusCode::OK {
            return Err(format!("GET {path} answered {status}"));
        }
        let mut hold = self.holding_connection().await?;
        let held = tokio::spawn(async move {
            let path = format!("{path}?{HOLD}");
            let mut again = 0;
            loop {
                let answer = client::send(&mut hold, Method::GET, &path, None, "").await;
                // An approval records the call `running` while the tool runs again (a change
                // with no feed entry): a request that reads it then is answered `running`, and
                // a client waiting for the outcome asks again.
                if let Ok((StatusCode::OK, body)) = &answer
                    && client::status_of(body).as_deref() == Some("running")
                    && again < 3
                {
                    again += 1;
                    continue;
                }
                return (hold, answer, Instant::now(), again);
            }
        });
        let counted = wait_for_waiters(&mut self.scrape, 1, Duration::from_secs(5)).await;
        if counted.as_ref().is_ok_and(|n| *n >= 1) {
            // The server counts a waiter just before it reads the call the first time; a read
            // after the approval has begun could see it `running`.
            tokio::time::sleep(SETTLE).await;
            let approved = self.approve(&token).await;
            if let Ok((started, answered)) = approved {
                let (hold, answer, woken, again) = held.await.map_err(|e| e.to_string())?;
                self.hold = Some(hold);
                self.asked_again += again;
                let (status, body) = answer?;
                let status_now = client::status_of(&body);
                if status != StatusCode::OK || status_now.as_deref() != Some("completed") {
                    return Err(format!("the held request answered {status} {status_now:?}"));
                }
                if measured {
                    self.after_answer.push(signed_us(woken, answered));
                    self.after_start.push(signed_us(woken, started));
                    self.approve.push(us(answered - started));
                    self.plain_get.push(us(plain_get));
                }
                return Ok(());
            }
            held.abort();
            return approved.map(|_| ());
        }
        held.abort();
        Err(match counted {
            Ok(n) => format!("the held request was not counted within 5 s ({n} waiters)"),
            Err(e) => e,
        })
    }

    /// One sample of the baseline: a client polling the call every `every` sees the decision.
    async fn poll_sample(&mut self, every: Duration) -> Result<(), String> {
        let (call_id, token) = client::suspend(&mut self.approver).await?;
        let path = format!("/calls/{call_id}");
        let mut poll = self.holding_connection().await?;
        let poller = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let deadline = Instant::now() + Duration::from_secs(55);
            while Instant::now() < deadline {
                ticks.tick().await;
                let (status, body) = client::send(&mut poll, Method::GET, &path, None, "").await?;
                match client::status_of(&body).as_deref() {
                    // Not decided, or decided and the tool runs again: not the outcome yet.
                    Some("suspended" | "running") if status == StatusCode::OK => {}
                    Some("completed") if status == StatusCode::OK => {
                        return Ok((poll, Instant::now()));
                    }
                    other => return Err(format!("a poll answered {status} {other:?}")),
                }
            }
            Err("the poller never saw the call completed".to_owned())
        });
        // Decided at a random point of the client's period, as a person would.
        tokio::time::sleep(random_below(every)).await;
        match self.approve(&token).await {
            Ok((_, answered)) => {
                let (poll, seen) = poller.await.map_err(|e| e.to_string())??;
                self.hold = Some(poll);
                self.polled.push(signed_us(seen, answered));
                Ok(())
            }
            Err(e) => {
                poller.abort();
                Err(e)
            }
        }
    }

    /// Counts a failed sample; the connections are made again.
    async fn recover(&mut self, why: &str) -> Result<(), String> {
        failed(self.name, why);
        self.errors += 1;
        self.approver = client::connect(self.approver_addr).await?;
        self.scrape = client::connect(self.holder).await?;
        self.get = client::connect(self.holder).await?;
        self.hold = None;
        Ok(())
    }

    fn finish(self, poll_every: Duration) -> Wake {
        Wake {
            name: self.name.to_owned(),
            samples: self.after_answer.len() as u64,
            errors: self.errors,
            asked_again: self.asked_again,
            after_answer: Spread::of(self.after_answer),
            after_start: Spread::of(self.after_start),
            approve: Spread::of(self.approve),
            get: Spread::of(self.plain_get),
            poll_every,
            polled: Spread::of(self.polled),
        }
    }
}

/// The wake-up variants: SQLite, and with `admin` one PostgreSQL replica and two.
pub async fn wake(options: &Options, admin: Option<&Admin>) -> Result<Vec<Wake>, String> {
    let samples = options.waiting.wake_samples;
    let poll_every = options.waiting.poll_every;
    let sqlite = sqlite_server(options, "wake", None, &[]).await?;
    let pg = match admin {
        Some(admin) => Some(
            postgres::pg_replicas(options, admin, "wake", 2, None, &postgres::small_pool()).await?,
        ),
        None => None,
    };
    let result = async {
        let mut probers = vec![Prober::new("wake", sqlite.addr, sqlite.addr).await?];
        if let Some((_, replicas)) = &pg {
            let (a, b) = (replicas[0].addr, replicas[1].addr);
            probers.push(Prober::new("pg_wake", a, a).await?);
            probers.push(Prober::new("pg_wake_cross", a, b).await?);
        }
        for i in 0..WAKE_WARMUP + samples {
            let measured = i >= WAKE_WARMUP;
            for prober in &mut probers {
                if let Err(why) = prober.sample(measured).await {
                    prober.recover(&why).await?;
                }
                if measured
                    && (i - WAKE_WARMUP).is_multiple_of(5)
                    && let Err(why) = prober.poll_sample(poll_every).await
                {
                    prober.recover(&why).await?;
                }
            }
        }
        let wakes: Vec<Wake> = probers
            .into_iter()
            .map(|prober| prober.finish(poll_every))
            .collect();
        for w in &wakes {
            eprintln!(
                "{:<14} wake-up after the approval's answer p50 {:.2} ms p99 {:.2} ms ({} \
                 samples, {} errors); polling every {} ms p50 {:.1} ms",
                w.name,
                w.after_answer.p50_us as f64 / 1e3,
                w.after_answer.p99_us as f64 / 1e3,
                w.samples,
                w.errors,
                w.poll_every.as_millis(),
                w.polled.p50_us as f64 / 1e3,
            );
        }
        Ok(wakes)
    }
    .await;
    postgres::stop(sqlite, pg, admin).await;
    result
}
