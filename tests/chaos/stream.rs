//! The event stream across faults: a reader follows `GET /events` on one process after another,
//! resuming from its cursor (`Last-Event-ID`) whenever its process dies, stops or ends the
//! stream; the checker then holds what it read against the change feed in the database: in
//! order, nothing twice, and nothing missing between its first event and its last. And the
//! webhook receiver gets every change of the feed, at least once.

use std::time::{Duration, Instant};

use super::common::Site;
use super::{Rng, Server};

/// A read of the stream that gets nothing for this long moves to another process (under load,
/// changes come every few milliseconds; a stopped process sends nothing).
const STALL: Duration = Duration::from_millis(1500);

/// One event as read: its cursor and type, and its call.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: String,
    pub kind: String,
    pub call_id: String,
}

/// Follows the stream until `until`, resuming from the last cursor on whichever process is up.
pub async fn follow(server: &Server, mut rng: Rng, until: Instant) -> Vec<Seen> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut seen: Vec<Seen> = Vec::new();
    while Instant::now() < until {
        let Some(base) = server.base(&mut rng) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let mut request = http.get(format!("{base}/events"));
        if let Some(last) = seen.last() {
            request = request.header("last-event-id", &last.id);
        }
        let Ok(Ok(mut response)) = tokio::time::timeout(STALL, request.send()).await else {
            continue;
        };
        // A replica cut from the database answers 503 meanwhile: another one is asked.
        if response.status() == 503 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        assert_eq!(
            response.status(),
            200,
            "the stream resumes from its cursor on any process"
        );
        let mut pending = String::new();
        while Instant::now() < until {
            let Ok(Ok(Some(chunk))) = tokio::time::timeout(STALL, response.chunk()).await else {
                break;
            };
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let block: String = pending.drain(..end + 2).collect();
                if let Some(event) = parse(&block) {
                    seen.push(event);
                }
            }
        }
    }
    seen
}

/// One server-sent event (`id:`, `event:`, `data:` lines); `None` for a comment.
fn parse(block: &str) -> Option<Seen> {
    let (mut id, mut kind, mut data) = (None, None, None);
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("id:") {
            id = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("event:") {
            kind = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("data:") {
            data = serde_json::from_str::<serde_json::Value>(value.trim()).ok();
        }
    }
    let call_id = data?["call"]["call_id"].as_str()?.to_owned();
    Some(Seen {
        id: id?,
        kind: kind?,
        call_id,
    })
}

/// A cursor's place in the feed's order: SQLite's `seq`; PostgreSQL's `xid-seq`.
fn place(cursor: &str) -> (u64, i64) {
    match cursor.split_once('-') {
        Some((xid, seq)) => (xid.parse().unwrap(), seq.parse().unwrap()),
        None => (0, cursor.parse().unwrap()),
    }
}

/// The change feed as stored, in its order: (place, type, call).
async fn stored_feed(server: &Server) -> Vec<((u64, i64), String, String)> {
    match server.at.database_url() {
        Some(url) => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let floor = client
                .query_one("SELECT floor_xid::text, floor_seq FROM feed_state", &[])
                .await
                .unwrap();
            let (floor_xid, floor_seq): (String, i64) = (floor.get(0), floor.get(1));
            if floor_seq != 0 {
                eprintln!("the feed was pruned up to {floor_xid}-{floor_seq}");
            }
            let rows = client
                .query(
                    "SELECT xid::text, seq, type, call_id FROM feed ORDER BY xid, seq",
                    &[],
                )
                .await
                .unwrap();
            rows.iter()
                .map(|row| {
                    let xid: String = row.get(0);
                    ((xid.parse().unwrap(), row.get(1)), row.get(2), row.get(3))
                })
                .collect()
        }
        None => {
            let conn =
                rusqlite::Connection::open(server.at.data_dir().join("toolgate.db")).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            let mut statement = conn
                .prepare("SELECT seq, type, call_id FROM feed ORDER BY seq")
                .unwrap();
            statement
                .query_map([], |row| Ok(((0, row.get(0)?), row.get(1)?, row.get(2)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        }
    }
}

/// What the stream read is the feed between its first event and its last: in order, nothing
/// twice, nothing missing, each as stored. Its count, or the first difference.
pub async fn check(server: &Server, seen: &[Seen]) -> Result<usize, String> {
    let (Some(first), Some(last)) = (seen.first(), seen.last()) else {
        return Err("the event stream delivered nothing".into());
    };
    for pair in seen.windows(2) {
        if place(&pair[1].id) <= place(&pair[0].id) {
            return Err(format!(
                "the event stream went back or repeated: {:?} after {:?}",
                pair[1], pair[0]
            ));
        }
    }
    let (from, to) = (place(&first.id), place(&last.id));
    let all = stored_feed(server).await;
    let head: Vec<_> = all.iter().take(3).cloned().collect();
    let total = all.len();
    let stored: Vec<_> = all
        .into_iter()
        .filter(|(at, _, _)| *at >= from && *at <= to)
        .collect();
    for (n, (at, kind, call_id)) in stored.iter().enumerate() {
        let Some(read) = seen.get(n) else {
            return Err(format!(
                "the event stream missed {kind} of {call_id} at {at:?}"
            ));
        };
        if place(&read.id) != *at || read.kind != *kind || read.call_id != *call_id {
            let before = &seen[n.saturating_sub(2)..(n + 2).min(seen.len())];
            let stored_before = &stored[n.saturating_sub(2)..(n + 2).min(stored.len())];
            return Err(format!(
                "the event stream read {read:?} where the feed has {kind} of {call_id} at \
                 {at:?} (event {n} of those read: around it the stream read {before:?}, the \
                 feed has {stored_before:?}; the feed's first of {total}: {head:?})"
            ));
        }
    }
    if seen.len() != stored.len() {
        return Err(format!(
            "the event stream read {} events where the feed has {} between them",
            seen.len(),
            stored.len()
        ));
    }
    Ok(seen.len())
}

/// Every change of the feed reaches the webhook receiver at least once (within 30 s of the
/// run's end: deliveries a fault interrupted are retried with a growing pause). How many
/// deliveries it got, or the first change it never got.
pub async fn check_webhooks(server: &Server) -> Result<usize, String> {
    let stored = stored_feed(server).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = server.hooks.got();
        let delivered: std::collections::HashSet<(String, String)> = got
            .iter()
            .filter_map(|body| {
                let kind = body["type"].as_str()?.to_owned();
                let call_id = body["data"]["call"]["call_id"].as_str()?.to_owned();
                Some((kind, call_id))
            })
            .collect();
        let missing = stored
            .iter()
            .find(|(_, kind, call_id)| !delivered.contains(&(kind.clone(), call_id.clone())));
        match missing {
            None => return Ok(got.len()),
            Some((at, kind, call_id)) if Instant::now() > deadline => {
                return Err(format!(
                    "the webhook never got {kind} of {call_id} (the feed's {at:?})"
                ));
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
