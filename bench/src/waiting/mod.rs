//! Waiting without polling: how soon a held request (`?wait=`) hears of a decision, and what a
//! held request costs in memory. (Webhook deliveries, the third way not to poll, are
//! [`crate::webhooks`]'.) The wake-ups are measured in `wake.rs`, the memory in `held.rs`.
//!
//! - **Wake-up latency** (`wake` on SQLite; `pg_wake` on one PostgreSQL replica and
//!   `pg_wake_cross` across two of one database): a call suspends (`ask_human`), a
//!   `GET /calls/{id}?wait=55` is sent for it, the harness reads `toolgate_waiters` from the
//!   holding server's `/metrics` until it counts the request, then approves the call. The
//!   interval is from the instant the approval's answer has arrived at the client (the decision
//!   is committed before it is answered) to the instant the held answer has. It may be negative:
//!   the commit wakes the held request, whose answer can overtake the approval's. Beside it, from
//!   the same samples: the same to the approval's start, the approval's round trip, one plain
//!   `GET /calls/{id}` (one poll), and, on every fifth sample, a client that polls the call every
//!   `poll_every` instead of waiting (the decision made at a random point of its period): what
//!   waiting replaces. One sample at a time, the variants' samples interleaved.
//! - **Memory of held requests** (`held`, `pg_held`): a fresh server with `max_in_flight` 64
//!   gets `held` suspended calls and a connection for each, which reads its call once and stays
//!   open; then one `GET /calls/{id}?wait=55` on each connection, until `toolgate_waiters`
//!   counts them all. Its resident memory before, with the connections idle, and with the
//!   requests held gives the cost of one held request and how much of it is its connection;
//!   beside it, what an idle connection costs the bare axum server. Meanwhile a read and a
//!   durable write must still be answered `200` (held requests give back their `max_in_flight`
//!   slot: were they counted, the 65th would be refused). A graceful stop must then answer
//!   every held request.

use std::time::{Duration, Instant};

use crate::harness::client::{Sender, metric};

mod held;
mod wake;

pub use crate::harness::WaitOptions;
pub use held::{Held, held, raise_fd_limit};
pub use wake::{Spread, Wake, wake};

/// How long a request is held at most (the server's limit).
const HOLD: &str = "wait=55";

/// `toolgate_waiters` of the server on `sender`.
async fn waiters(sender: &mut Sender) -> Result<u64, String> {
    Ok(metric(sender, "toolgate_waiters").await? as u64)
}

/// Reads `toolgate_waiters` until it is at least `count`, for at most `limit`; the last
/// figure read.
async fn wait_for_waiters(sender: &mut Sender, count: u64, limit: Duration) -> Result<u64, String> {
    let deadline = Instant::now() + limit;
    loop {
        let now = waiters(sender).await?;
        if now >= count || Instant::now() > deadline {
            return Ok(now);
        }
        tokio::task::yield_now().await;
    }
}

fn ms(value_us: i64) -> String {
    format!("{:.2} ms", value_us as f64 / 1e3)
}

/// The section of the report on waiting without polling.
pub fn markdown(wake: &[Wake], held: &[Held]) -> String {
    let mut out = String::new();
    if !wake.is_empty() {
        out.push_str(
            "\nWake-up: a suspended call's GET /calls/{id}?wait=55 held (counted by \
             toolgate_waiters), then the call approved; one sample at a time. \"after the \
             answer\" runs from the approval's answer at the client to the held answer \
             (negative: the held answer came first); \"after the request\" from the approval's \
             request; \"asked again\": held answers that were the call `running` (read between \
             the decision and the outcome), sent again and timed to the last. Baselines from the \
             same samples: the approval's round trip, one plain GET of the call, and a client \
             polling the call instead:\n\n\
             | variant | samples | errors | asked again | after the answer p50 | p99 | min | max | after the \
             request p50 | p99 | approval p50 | plain GET p50 | p99 | polling every | its p50 | \
             p99 |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
             | ---: | ---: | ---: | ---: |\n",
        );
        for w in wake {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ms | {} | \
                 {} |\n",
                w.name,
                w.samples,
                w.errors,
                w.asked_again,
                ms(w.after_answer.p50_us),
                ms(w.after_answer.p99_us),
                ms(w.after_answer.min_us),
                ms(w.after_answer.max_us),
                ms(w.after_start.p50_us),
                ms(w.after_start.p99_us),
                ms(w.approve.p50_us),
                ms(w.get.p50_us),
                ms(w.get.p99_us),
                w.poll_every.as_millis(),
                ms(w.polled.p50_us),
                ms(w.polled.p99_us),
            ));
        }
    }
    if !held.is_empty() {
        out.push_str(
            "\nHeld requests: a connection of its own for each of as many suspended calls, \
             which reads its call once (GET /calls/{id}) and stays open, idle; then \
             GET /calls/{id}?wait=55 on each, all held at once. The server's resident memory \
             (VmRSS; in brackets RssAnon, its heap and stacks) before, with the connections \
             idle, and with the requests held; per held request, with its connection and of \
             which the idle connection; the machine's TCP sockets and their buffers' pages \
             (/proc/net/sockstat: both ends, the kernel's, not in RSS); calls made while they \
             are held:\n\n\
             | scenario | held | errors | max_in_flight | idle RSS | before | connections idle \
             | requests held | per held request | of which its idle connection | an idle \
             connection of the bare axum server | TCP sockets, buffer pages | held in | echo, \
             write while held | released by SIGTERM in |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- \
             | ---: | --- | ---: |\n",
        );
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        let both = |all: u64, anon: u64| format!("{} ({})", mib(all), mib(anon));
        let tcp = |t: Option<(u64, u64)>| t.map_or("n/a".into(), |(n, p)| format!("{n}, {p}"));
        for h in held {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} KiB | {:.1} KiB | {} | {} -> {} \
                 | {:.2} s | {:.2} ms, {:.2} ms | {:.0} ms |\n",
                h.name,
                h.held,
                h.errors,
                h.max_in_flight,
                mib(h.idle_rss_kib),
                both(h.before_rss_kib, h.before_anon_kib),
                both(h.connected_rss_kib, h.connected_anon_kib),
                both(h.held_rss_kib, h.held_anon_kib),
                h.per_request_kib(),
                h.per_connection_kib(),
                h.bare_connection_kib
                    .map_or("n/a".to_owned(), |k| format!("{k:.1} KiB")),
                tcp(h.tcp_before),
                tcp(h.tcp_held),
                h.opened_in.as_secs_f64(),
                h.calls_while_held[0].as_secs_f64() * 1e3,
                h.calls_while_held[1].as_secs_f64() * 1e3,
                h.released_in.as_secs_f64() * 1e3,
            ));
        }
        if let Some(h) = held.first() {
            out.push_str(&format!(
                "\n(open files limit of the harness and the servers: {})\n",
                h.fd_limit
            ));
        }
    }
    out
}
