//! What only a shared database has: several stores (replicas, in this process) on one
//! PostgreSQL database. Leases, the sweep of a dead replica's calls, outcomes refused once a run
//! lost its call, migrations under a lock, and a database that cannot be reached. The behaviour
//! every backend shares is the conformance suite in `tests/store/`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pg::TestDb;
use serde_json::json;
use tokio_postgres::NoTls;
use toolgate::Effect;
use toolgate::store::{
    CallStatus, CallStore, FeedCursor, FeedStore, Inserted, NewCall, NewDelivery, Outcome,
    PostgresOptions, PostgresStore, Resolution, Resolved, Store, StoreError, Timestamp,
};

fn keyed(id: &str, key: Option<&str>, effect: Effect) -> NewCall {
    NewCall {
        call_id: id.to_owned(),
        tool: "tool".into(),
        effect,
        caller: Some("agent".into()),
        input: json!({"id": id}),
        idempotency_key: key.map(str::to_owned),
        attempts: 1,
        created_at: Timestamp::now(),
        trace: None,
    }
}

/// Short leases, so that a replica's death is noticed within a test.
fn quick() -> PostgresOptions {
    PostgresOptions {
        pool_size: 3,
        lease_ttl: Duration::from_millis(600),
        heartbeat: Duration::from_millis(150),
    }
}

/// Long leases renewed rarely: nothing expires unless a test says so.
fn slow() -> PostgresOptions {
    PostgresOptions {
        pool_size: 3,
        lease_ttl: Duration::from_secs(600),
        heartbeat: Duration::from_secs(300),
    }
}

async fn sql(db: &TestDb) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&db.url, NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

async fn wait_for_status(store: &dyn Store, call_id: &str, status: CallStatus) -> Duration {
    let start = Instant::now();
    loop {
        let call = store.call(call_id).await.unwrap().unwrap();
        if call.status == status {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{call_id} is still {:?}",
            call.status
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_running_calls_are_settled_by_effect_and_a_live_ones_are_not() {
    let db = TestDb::create().await;
    let alive = PostgresStore::open(&db.url, quick()).await.unwrap();
    alive
        .insert_call(keyed("live", Some("kl"), Effect::Write), None)
        .await
        .unwrap();
    let dead = PostgresStore::open(&db.url, quick()).await.unwrap();
    for (id, effect) in [
        ("w", Effect::Write),
        ("i", Effect::Idempotent),
        ("r", Effect::Read),
    ] {
        dead.insert_call(keyed(id, Some(id), effect), None)
            .await
            .unwrap();
    }
    // Dropped without `close`: its heartbeat stops and its lease runs out, as in a `kill -9`.
    drop(dead);
    let took = wait_for_status(&alive, "w", CallStatus::NeedsReconciliation).await;
    assert!(took < Duration::from_secs(30));
    let write = alive.call("w").await.unwrap().unwrap();
    let swept = write.events.last().unwrap();
    assert_eq!(swept.kind, "needs_reconciliation");
    assert!(swept.details.as_ref().unwrap()["replica"].is_string());
    for id in ["i", "r"] {
        assert_eq!(
            alive.call(id).await.unwrap().unwrap().status,
            CallStatus::Interrupted,
            "{id}"
        );
    }
    // Several sweeps later, the live replica's call still runs, untouched.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let live = alive.call("live").await.unwrap().unwrap();
    assert_eq!(live.status, CallStatus::Running);
    assert_eq!(
        live.events
            .iter()
            .map(|e| e.kind.as_str())
            .collect::<Vec<_>>(),
        ["created"]
    );
    alive
        .finish_call("live", Some(1), 1, &Outcome::Completed { output: json!(1) })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_lost_its_lease_cannot_overwrite_what_happened_since() {
    let db = TestDb::create().await;
    let paused = PostgresStore::open(&db.url, slow()).await.unwrap();
    paused
        .insert_call(keyed("p", Some("kp"), Effect::Write), None)
        .await
        .unwrap();
    // The replica stops renewing (paused, cut off): its lease lapses, by the database's clock.
    // It is lapsed again until the sweep comes, since the replica's first heartbeat, which runs
    // at its start, may land after the first time (on a busy machine it does).
    let client = sql(&db).await;
    let sweeper = PostgresStore::open(&db.url, quick()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sweeper.call("p").await.unwrap().unwrap().status != CallStatus::NeedsReconciliation {
        assert!(Instant::now() < deadline, "p was never swept");
        client
            .execute(
                "UPDATE replicas SET lease_expires_at = clock_timestamp() - interval '1 second' \
                 WHERE replica_id = $1",
                &[&paused.replica_id()],
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // It wakes up and reports its outcome: refused, and kept as evidence.
    let err = paused
        .finish_call(
            "p",
            Some(1),
            1,
            &Outcome::Completed {
                output: json!({"sent": true}),
            },
        )
        .await
        .unwrap_err();
    let StoreError::LeaseLost(call) = err else {
        panic!("expected LeaseLost, got {err}");
    };
    assert_eq!(call.status, CallStatus::NeedsReconciliation);
    let late = call.events.last().unwrap();
    assert_eq!(late.kind, "late_outcome");
    let details = late.details.as_ref().unwrap();
    assert_eq!(details["output"], json!({"sent": true}));
    assert_eq!(details["replica"], paused.replica_id());
    assert_eq!(details["status"], "completed");
    // Seen from the other replica too, and nothing else changed.
    let seen = sweeper.call("p").await.unwrap().unwrap();
    assert_eq!(seen, *call);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_race_for_one_key_and_one_token() {
    let db = TestDb::create().await;
    let mut replicas: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        replicas.push(Arc::new(
            PostgresStore::open(&db.url, slow()).await.unwrap(),
        ));
    }
    for round in 0..10 {
        let tasks: Vec<_> = (0..9)
            .map(|i| {
                let store = replicas[i % 3].clone();
                let id = format!("k{round}-{i}");
                let key = format!("key{round}");
                tokio::spawn(async move {
                    store
                        .insert_call(keyed(&id, Some(&key), Effect::Write), None)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut new = 0;
        for task in tasks {
            match task.await.unwrap() {
                Inserted::New => new += 1,
                Inserted::Existing(call) => {
                    assert!(call.call_id.starts_with(&format!("k{round}-")))
                }
            }
        }
        assert_eq!(new, 1, "round {round}: one call per key across replicas");
    }

    // A suspension made on one replica is resolved on another, once.
    replicas[0]
        .insert_call(
            keyed("s", None, Effect::Write),
            Some(Outcome::Suspended {
                token: "tok".into(),
                reason: "decide".into(),
                input_schema: json!({"type": "object"}),
                expires_at: None,
            }),
        )
        .await
        .unwrap();
    let tasks: Vec<_> = (1..3)
        .flat_map(|i| [i, i])
        .map(|i| {
            let store = replicas[i].clone();
            tokio::spawn(async move {
                store
                    .resolve(
                        "tok",
                        Resolution::Approve {
                            resume_input: json!({"by": i}),
                            quorum: 1,
                            edit: None,
                        },
                        Some("ops"),
                    )
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut approved = 0;
    for task in tasks {
        match task.await.unwrap() {
            Resolved::Approved(call) => {
                approved += 1;
                assert_eq!(call.attempts, 2);
            }
            Resolved::AlreadyResolved(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(approved, 1);
}

#[tokio::test]
async fn live_replicas_are_counted_by_their_leases() {
    let db = TestDb::create().await;
    let first = PostgresStore::open(&db.url, slow()).await.unwrap();
    let second = PostgresStore::open(&db.url, slow()).await.unwrap();
    for store in [&first, &second] {
        assert_eq!(store.counts().await.unwrap().live_replicas, Some(2));
    }
    // A replica that left ended its lease; one whose lease ran out is not live either.
    second.close().await.unwrap();
    assert_eq!(first.counts().await.unwrap().live_replicas, Some(1));
    sql(&db)
        .await
        .execute(
            "UPDATE replicas SET lease_expires_at = clock_timestamp() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(first.counts().await.unwrap().live_replicas, Some(0));
    first.close().await.unwrap();
}

#[tokio::test]
async fn replicas_that_start_together_migrate_once() {
    let db = TestDb::create().await;
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { PostgresStore::open(&url, slow()).await })
        })
        .collect();
    let mut replicas = Vec::new();
    for open in opens {
        replicas.push(open.await.unwrap().expect("every replica starts"));
    }
    let client = sql(&db).await;
    let versions: i64 = client
        .query_one("SELECT count(*) FROM toolgate_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(versions, 18, "each of the eighteen migrations applied once");
    let leases: i64 = client
        .query_one("SELECT count(*) FROM replicas", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leases, 4, "one lease per replica");
    // A clean close ends the lease at once.
    replicas.pop().unwrap().close().await.unwrap();
    let leases: i64 = client
        .query_one("SELECT count(*) FROM replicas", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leases, 3);
}

#[tokio::test]
async fn a_database_from_a_newer_build_is_refused() {
    let db = TestDb::create().await;
    drop(PostgresStore::open(&db.url, slow()).await.unwrap());
    sql(&db)
        .await
        .batch_execute("INSERT INTO toolgate_migrations (version) VALUES (99)")
        .await
        .unwrap();
    match PostgresStore::open(&db.url, slow()).await {
        Err(StoreError::SchemaTooNew { found: 99, .. }) => {}
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a newer schema must not be opened"),
    }
}

#[tokio::test]
async fn an_unreachable_database_fails_fast_without_showing_the_password() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://app:s3cret-pw@127.0.0.1:{port}/toolgate");
    let start = Instant::now();
    let err = match PostgresStore::open(&url, slow()).await {
        Err(err) => err,
        Ok(_) => panic!("nothing listens there"),
    };
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    let text = err.to_string();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_feed_loses_and_repeats_nothing_while_three_replicas_write_at_once() {
    let db = TestDb::create().await;
    let reader = PostgresStore::open(&db.url, slow()).await.unwrap();
    let start = reader.feed_head().await.unwrap();
    let mut writers: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        writers.push(Arc::new(
            PostgresStore::open(&db.url, slow()).await.unwrap(),
        ));
    }
    let total = 3 * 6 * 20;
    let tasks: Vec<_> = (0..18)
        .map(|t| {
            let store = writers[t % 3].clone();
            tokio::spawn(async move {
                for i in 0..20 {
                    let id = format!("f{t}-{i}");
                    store
                        .insert_call(
                            keyed(&id, None, Effect::Read),
                            Some(Outcome::Suspended {
                                token: format!("t{id}"),
                                reason: "r".into(),
                                input_schema: json!({}),
                                expires_at: None,
                            }),
                        )
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    // Read while they write, in small pages, moving the cursor as a client would.
    let mut seen = Vec::new();
    let mut after = start;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < total {
        assert!(Instant::now() < deadline, "saw {} of {total}", seen.len());
        let page = reader.feed(Some(&after), 5).await.unwrap();
        after = page.cursor;
        seen.extend(
            page.entries
                .into_iter()
                .map(|e| e.call().unwrap().call_id.clone()),
        );
    }
    for task in tasks {
        task.await.unwrap();
    }
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), total, "no entry twice");
    assert!(
        reader
            .feed(Some(&after), 5)
            .await
            .unwrap()
            .entries
            .is_empty(),
        "and none after the last"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_on_one_replica_wakes_the_feed_readers_of_another() {
    let db = TestDb::create().await;
    let listener = PostgresStore::open(&db.url, slow()).await.unwrap();
    let writer = PostgresStore::open(&db.url, slow()).await.unwrap();
    let mut changes = listener.feed_changes();
    // Let the listener connect and settle, then take what it has signalled so far.
    tokio::time::sleep(Duration::from_millis(300)).await;
    changes.borrow_and_update();
    writer
        .insert_call(
            keyed("n", None, Effect::Write),
            Some(Outcome::Suspended {
                token: "tn".into(),
                reason: "r".into(),
                input_schema: json!({}),
                expires_at: None,
            }),
        )
        .await
        .unwrap();
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("woken")
        .unwrap();
    // Woken by NOTIFY or, were it lost, by the once-a-second re-check: either way a waiter on one
    // replica hears of a commit on another. The latency is shown, not asserted (the machine is
    // shared); BENCHMARKS.md is where it is measured.
    eprintln!("woken {} ms after the commit", start.elapsed().as_millis());
}

/// `count` replicas on `db`, with long leases.
async fn replicas(db: &TestDb, count: usize) -> Vec<Arc<dyn Store>> {
    let mut replicas: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..count {
        replicas.push(Arc::new(
            PostgresStore::open(&db.url, slow()).await.unwrap(),
        ));
    }
    replicas
}

fn delivery(n: usize) -> NewDelivery {
    NewDelivery {
        webhook: "https://receiver".into(),
        message_id: format!("msg_{n}"),
        kind: "call.completed".into(),
        call_id: format!("c{n}"),
        body: format!("{{\"n\":{n}}}"),
        channel: None,
        recipient: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_never_claim_the_same_delivery() {
    let db = TestDb::create().await;
    let replicas = replicas(&db, 2).await;
    let total = 120;
    assert!(
        replicas[0]
            .enqueue_deliveries(
                None,
                &FeedCursor("1".into()),
                (0..total).map(delivery).collect(),
            )
            .await
            .unwrap()
    );
    // Four claimants on each replica, until every delivery is claimed. A claim may come back
    // empty while another replica's claim is in flight (its rows are skipped, not waited for).
    let claimed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let claimants: Vec<_> = (0..8)
        .map(|i| {
            let store = replicas[i % 2].clone();
            let claimed = claimed.clone();
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut mine = Vec::new();
                while claimed.load(std::sync::atomic::Ordering::SeqCst) < total {
                    assert!(Instant::now() < deadline, "claims stalled");
                    let got = store
                        .claim_deliveries(4, Duration::from_secs(600))
                        .await
                        .unwrap();
                    claimed.fetch_add(got.len(), std::sync::atomic::Ordering::SeqCst);
                    mine.extend(got.into_iter().map(|d| d.id));
                    tokio::task::yield_now().await;
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut per_replica = [0; 2];
    for (i, claimant) in claimants.into_iter().enumerate() {
        let mine = claimant.await.unwrap();
        per_replica[i % 2] += mine.len();
        all.extend(mine);
    }
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "no delivery claimed twice");
    assert_eq!(all.len(), total, "every delivery claimed");
    eprintln!("claimed per replica: {per_replica:?}");
    for d in replicas[1]
        .list_deliveries(None, None, 1000)
        .await
        .unwrap()
        .deliveries
    {
        assert_eq!(d.attempts, 1, "delivery {} counted once", d.id);
    }
    assert!(
        replicas[1]
            .claim_deliveries(10, Duration::from_secs(600))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_racing_to_move_the_outbox_cursor_have_one_winner() {
    let db = TestDb::create().await;
    let replicas = replicas(&db, 2).await;
    // Round 0 races for the first move (no cursor yet), every later one for a move from the
    // cursor the round before left. Each contender brings a delivery of its own.
    let mut from: Option<FeedCursor> = None;
    for round in 0..10 {
        let contenders: Vec<_> = (0..6)
            .map(|i| {
                let store = replicas[i % 2].clone();
                let from = from.clone();
                let n = round * 100 + i;
                tokio::spawn(async move {
                    let to = FeedCursor(format!("{round}-{i}"));
                    let moved = store
                        .enqueue_deliveries(from.as_ref(), &to, vec![delivery(n)])
                        .await
                        .unwrap();
                    (moved, to, n)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for contender in contenders {
            let (moved, to, n) = contender.await.unwrap();
            if moved {
                winners.push((to, n));
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let (to, n) = winners.pop().unwrap();
        for replica in &replicas {
            assert_eq!(replica.webhook_cursor().await.unwrap(), Some(to.clone()));
        }
        // Only the winner's delivery was created.
        let newest = replicas[0]
            .list_deliveries(None, None, 1000)
            .await
            .unwrap()
            .deliveries;
        assert_eq!(newest.len(), round + 1, "round {round}");
        assert_eq!(newest[0].message_id, format!("msg_{n}"));
        from = Some(to);
    }
}
