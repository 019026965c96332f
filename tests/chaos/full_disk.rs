//! What the chaos run's full disk found, made a test of its own: a write whose effect happened
//! while the SQLite process's disk was full. Its outcome could not be written, and the call stayed
//! `running` for as long as the process lived (the key answering `409 call_in_progress`), while
//! the caller was answered `500 internal`. Now a full disk is the store unavailable, as a
//! PostgreSQL server out of space is: `503 store_unavailable` with `Retry-After`, and the outcome
//! is recorded once there is room again, without a restart. And the records of reads answered
//! meanwhile (written behind their answer) were lost; now they are kept until there is room.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::common::{self, Backend, Binary, Location, Site};
use super::disk::Disk;

#[tokio::test]
async fn a_write_that_meets_a_full_disk_is_recorded_once_there_is_room() {
    let at = Location::new(Backend::Sqlite).await;
    let Some(disk) = Disk::mount(at.data_dir()) else {
        return;
    };
    let env = [("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "1500")];
    let server = Binary::start_with(&at, &[], &env);
    let api = &server.api;
    let email = json!({"to": "a@example.com", "subject": "s", "body": "while full"});

    // The call is recorded running, then the disk fills while the email is being sent.
    let call = api.call_keyed("send_email", "full-1", email.clone());
    let fill = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        disk.fill();
    };
    let ((status, _, retry_after, body), ()) = tokio::join!(call, fill);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert!(retry_after.is_some(), "a 503 says when to retry");
    let sent = common::outbox(&at);
    assert_eq!(sent.len(), 1, "the email was sent: {sent:?}");

    // A read is answered while the disk is full: its record, written behind its answer, waits.
    let (status, read) = api
        .post("/tools/echo/call", json!({"input": {"text": "while full"}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{read}");
    let read_id = read["call_id"].as_str().unwrap().to_owned();

    // Nothing new runs while the disk is full: refused before the tool is reached.
    let other = json!({"to": "a@example.com", "subject": "s", "body": "refused"});
    let (status, _, _, body) = api.call_keyed("send_email", "full-2", other).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(common::outbox(&at).len(), 1);

    // Room again: the outcome is recorded by the same process, and the key answers it.
    disk.free();
    let deadline = Instant::now() + Duration::from_secs(20);
    let replayed = loop {
        let (status, replayed, _, body) =
            api.call_keyed("send_email", "full-1", email.clone()).await;
        if status == StatusCode::OK {
            assert_eq!(replayed.as_deref(), Some("true"), "{body}");
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the call was never recorded once the disk had room: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(replayed["status"], "completed", "{replayed}");
    assert_eq!(replayed["output"]["message_id"], sent[0]["message_id"]);
    assert_eq!(
        common::outbox(&at).len(),
        1,
        "sent once, whatever was retried"
    );
    let (status, record) = api
        .get(&format!("/calls/{}", replayed["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "completed", "{record}");

    // And the read's record is in the file: kept until there was room.
    common::eventually("the read's record in the file", async || {
        at.stored_calls()
            .await
            .iter()
            .any(|c| c.call_id == read_id)
            .then_some(())
    })
    .await;
    server.kill();
    drop(disk);
}

/// The thirty-minute run's find: under a load of reads and writes, a disk filled and freed again
/// and again. SQLite, meeting the full disk in one write of a batch, could roll the batch's whole
/// transaction back; the writes after it then ran on their own, outside it, and the commit failed
/// (`cannot commit - no transaction is active`): answered `500 internal`, the read records of the
/// batch dropped, outcomes given up. Now every answer is `200` or `503 store_unavailable`, every
/// read answered `200` has its record once the disk has room, and nothing stays `running`.
#[tokio::test]
async fn a_disk_filled_under_load_answers_503_and_keeps_every_read() {
    let at = Location::new(Backend::Sqlite).await;
    let Some(disk) = Disk::mount(at.data_dir()) else {
        return;
    };
    let server = Binary::start_with(&at, &[], &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|client| {
            let api = server.api.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut reads, mut failures) = (Vec::new(), Vec::new());
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let text = format!("{client}-{n} {}", "x".repeat(2000));
                    let (status, body) = if n % 2 == 0 {
                        let input = json!({"input": {"text": text}});
                        api.post("/tools/echo/call", input).await
                    } else {
                        let to = "a@example.com";
                        let input = json!({"input": {"to": to, "subject": "s", "body": text}});
                        api.post("/tools/send_email/call", input).await
                    };
                    if !room_or_unavailable(status, &body) {
                        failures.push(format!("{status} {body}"));
                    } else if status == StatusCode::OK && n % 2 == 0 {
                        reads.push(body["call_id"].as_str().unwrap().to_owned());
                    }
                }
                (reads, failures)
            })
        })
        .collect();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        disk.fill();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        disk.free();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut reads, mut failures) = (Vec::new(), Vec::new());
    for client in clients {
        let (r, f) = client.await.unwrap();
        reads.extend(r);
        failures.extend(f);
    }
    assert!(
        failures.is_empty(),
        "{} answers neither 200 nor 503, first {:?}; the server logged {:#?}",
        failures.len(),
        failures.iter().take(3).collect::<Vec<_>>(),
        logged_errors(&server)
    );
    // Two seconds after the disk has room, the kept records are in the file: a `kill -9` then
    // loses none of them (the chaos checker's window).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stored: std::collections::HashSet<String> = at
        .stored_calls()
        .await
        .into_iter()
        .map(|c| c.call_id)
        .collect();
    let missing: Vec<&String> = reads.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} reads answered have no record 2 s after the disk had room, first {:?}; \
         the server logged {:#?}",
        missing.len(),
        reads.len(),
        missing.first(),
        logged_errors(&server)
    );
    every_outcome_recorded(&at).await;
    eprintln!(
        "{} reads answered, {} calls stored",
        reads.len(),
        stored.len()
    );
    server.kill();
    drop(disk);
}

/// Emails with a large body (writes: answered once committed), `n` at once, `rounds` times;
/// every answer, as (status, body).
async fn emails(
    api: &common::Api,
    rounds: usize,
    n: usize,
) -> Vec<(StatusCode, serde_json::Value)> {
    let body = "w".repeat(20_000);
    let input = json!({"input": {"to": "a@example.com", "subject": "s", "body": body}});
    let mut answers = Vec::new();
    for _ in 0..rounds {
        let calls = (0..n).map(|_| api.post("/tools/send_email/call", input.clone()));
        answers.extend(futures_util::future::join_all(calls).await);
    }
    answers
}

/// The thirty-minute run's second find: the WAL index (`-shm`), which SQLite grows by writing
/// into it, could not grow on a full disk. SQLite says `SQLITE_IOERR_SHMSIZE` (4874), not
/// `SQLITE_FULL`, and the store answered `500 internal`. It happens where the WAL file is
/// larger than what its index covers: a WAL that grew long while a reader held a snapshot, then
/// restarted, then the process restarted (its index rebuilt small); a full disk then lets
/// commits write into the WAL's old space until the index needs its second 32 KiB. Now that is
/// a full disk too: `503 store_unavailable`.
#[tokio::test]
async fn a_wal_index_that_cannot_grow_is_a_full_disk() {
    let at = Location::new(Backend::Sqlite).await;
    let Some(disk) = Disk::mount(at.data_dir()) else {
        return;
    };
    let server = Binary::start_with(&at, &[], &[]);
    let file = at.data_dir().join("toolgate.db");
    let wal = at.data_dir().join("toolgate.db-wal");

    // A reader holds a snapshot, so no checkpoint resets the WAL: it grows past 4,096 frames.
    let reader = rusqlite::Connection::open(&file).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM calls", [], |row| row.get(0))
        .unwrap();
    while std::fs::metadata(&wal).map_or(0, |m| m.len()) < 24 << 20 {
        emails(&server.api, 1, 16).await;
    }
    drop(reader);
    // A checkpoint completes, and the WAL starts again from its beginning (its file stays): the
    // checkpoint sequence number in its header (bytes 12-15) moves on.
    let restarts = || {
        let header = std::fs::read(&wal).unwrap();
        u32::from_be_bytes(header[12..16].try_into().unwrap())
    };
    let before = restarts();
    let deadline = Instant::now() + Duration::from_secs(30);
    while restarts() == before {
        assert!(Instant::now() < deadline, "the WAL never started again");
        emails(&server.api, 1, 4).await;
    }
    server.kill();

    // The restarted process rebuilds the index for the few frames now valid.
    let server = Binary::start_with(&at, &[], &[]);
    disk.fill();
    let mut answers = Vec::new();
    for _ in 0..40 {
        answers.extend(emails(&server.api, 1, 16).await);
    }
    disk.free();
    let statuses: std::collections::BTreeMap<u16, usize> =
        answers
            .iter()
            .fold(Default::default(), |mut count, (status, _)| {
                *count.entry(status.as_u16()).or_default() += 1;
                count
            });
    let wrong = answers
        .iter()
        .find(|(status, body)| !room_or_unavailable(*status, body));
    assert!(
        wrong.is_none(),
        "answers {statuses:?}, first wrong {wrong:?}; the server logged {:#?}",
        logged_errors(&server)
    );
    let shm = server
        .log()
        .iter()
        .filter(|l| l.contains("SQLite code 4874"))
        .count();
    assert!(
        shm > 0,
        "the WAL index never had to grow on the full disk: answers {statuses:?}"
    );
    // Whatever ran meanwhile has its outcome recorded once there is room.
    every_outcome_recorded(&at).await;
    eprintln!("answers while the disk was full: {statuses:?}; {shm} commits met SHMSIZE");
    server.kill();
    drop(disk);
}

/// Waits until every call in the file is completed: none left `running` by an outcome the disk
/// could not take.
async fn every_outcome_recorded(at: &Location) {
    common::eventually("every outcome recorded", async || {
        let calls = at.stored_calls().await;
        calls.iter().all(|c| c.status == "completed").then_some(())
    })
    .await;
}

/// Whether an answer is one a full disk allows: `200`, or `503 store_unavailable`.
fn room_or_unavailable(status: StatusCode, body: &serde_json::Value) -> bool {
    status == StatusCode::OK
        || (status == StatusCode::SERVICE_UNAVAILABLE
            && body["error"]["code"] == "store_unavailable")
}

/// The first errors and warnings the server logged, but the full disk's own (one per batch it
/// refused), for a failure to show.
fn logged_errors(server: &Binary) -> Vec<String> {
    let logged = server.log().into_iter().filter(|line| {
        (line.contains("ERROR") || line.contains("WARN")) && !line.contains("disk is full")
    });
    logged.take(20).collect()
}
