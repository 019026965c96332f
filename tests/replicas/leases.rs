//! Leases: a replica that dies (`kill -9`) or stops (`SIGSTOP`) past its lease has its running
//! calls settled by the survivors, its late outcome refused and kept as evidence; a live replica's
//! long call is untouched by the sweep of a dead one.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_write_leaves_its_call_needing_reconciliation_on_the_survivors() {
    let db = TestDb::create().await;
    let mut replicas = short_lease_replicas(&db.url, "3000").await;

    let started = Instant::now();
    let request = send_email_in_background(&replicas[0].api, "invoice-7");
    // Its intent is committed: A's handler now waits before it sends.
    let call_id = running_email(&replicas[1].api, &[]).await;
    replicas[0].kill();
    let killed = Instant::now();
    assert!(
        request.await.unwrap().is_err(),
        "no answer came before the kill"
    );

    let [a, b, c] = &replicas[..] else {
        unreachable!()
    };
    let swept = eventually(
        "the killed replica's call needs reconciliation",
        DEADLINE,
        async || {
            for survivor in [b, c] {
                let found = record(&survivor.api, &call_id).await;
                if found["status"] == "needs_reconciliation" {
                    return Some(found);
                }
            }
            None
        },
    )
    .await;
    println!(
        "kill -9 to needs_reconciliation: {} ms (lease 1500 ms, heartbeat 300 ms)",
        killed.elapsed().as_millis()
    );
    assert_eq!(kinds(&swept), ["created", "needs_reconciliation"]);
    assert_eq!(swept["events"][1]["details"]["replica"], a.id.as_str());
    for survivor in [b, c] {
        let seen = record(&survivor.api, &call_id).await;
        assert_eq!(
            seen["status"], "needs_reconciliation",
            "on {}",
            survivor.name
        );
    }

    // The orchestrator retries on another replica: refused, and nothing is sent.
    let retried = call(&c.api, "send_email", Some("invoice-7"), &email("invoice-7"))
        .await
        .unwrap();
    assert_eq!(retried.status, StatusCode::CONFLICT, "{retried:?}");
    assert_eq!(
        assert_error(&retried.body, "needs_reconciliation")["call_id"],
        call_id.as_str()
    );
    // Longer than the send would have taken, had anyone run it.
    tokio::time::sleep(Duration::from_millis(3500).saturating_sub(started.elapsed())).await;
    assert_eq!(all_outboxes(&replicas), Vec::<Value>::new());
    assert_eq!(
        record(&b.api, &call_id).await["status"],
        "needs_reconciliation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_replicas_long_call_is_untouched_by_the_sweep_of_a_dead_one() {
    let db = TestDb::create().await;
    let mut replicas = short_lease_replicas(&db.url, "4000").await;
    let watcher = replicas[2].api.clone();

    // A and B each run a long send; then A dies.
    let on_a = send_email_in_background(&replicas[0].api, "mail-a");
    let a_call = running_email(&watcher, &[]).await;
    let on_b = send_email_in_background(&replicas[1].api, "mail-b");
    let b_call = running_email(&watcher, &[&a_call]).await;
    replicas[0].kill();
    assert!(on_a.await.unwrap().is_err(), "A died before answering");

    // The sweep happened (A's call is settled), and passed B's call by.
    record_in(&watcher, &a_call, "needs_reconciliation").await;
    let b_meanwhile = record(&watcher, &b_call).await;
    println!(
        "B's call when A's was swept: {}",
        b_meanwhile["status"].as_str().unwrap_or("?")
    );
    assert!(
        ["running", "completed"].contains(&b_meanwhile["status"].as_str().unwrap_or("")),
        "{b_meanwhile}"
    );

    let answer = on_b.await.unwrap().unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.body["call_id"], b_call.as_str());
    let done = record(&watcher, &b_call).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(kinds(&done), ["created", "completed"]);
    let lines = all_outboxes(&replicas);
    assert_eq!(lines.len(), 1, "B's email alone: {lines:?}");
    assert_eq!(replicas[1].outbox(), lines);
    assert_eq!(lines[0]["call_id"], b_call.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_past_its_lease_has_its_late_outcome_refused_and_recorded() {
    let db = TestDb::create().await;
    let replicas = short_lease_replicas(&db.url, "3000").await;
    let [a, b, _] = &replicas[..] else {
        unreachable!()
    };

    let request = send_email_in_background(&a.api, "invoice-9");
    let call_id = running_email(&b.api, &[]).await;
    a.signal("STOP");
    let stopped = Instant::now();
    record_in(&b.api, &call_id, "needs_reconciliation").await;
    println!(
        "SIGSTOP to needs_reconciliation: {} ms",
        stopped.elapsed().as_millis()
    );
    a.signal("CONT");

    // A wakes, its handler sends, and its outcome is refused.
    let answer = request.await.unwrap().unwrap();
    assert_eq!(answer.status, StatusCode::CONFLICT, "{answer:?}");
    let now = assert_error(&answer.body, "lease_lost");
    assert_eq!(now["call_id"], call_id.as_str(), "{now}");
    assert_eq!(now["status"], "needs_reconciliation", "{now}");

    // Recorded as evidence for whoever settles it: what A did, and the email it sent.
    let settled = record(&b.api, &call_id).await;
    assert_eq!(settled["status"], "needs_reconciliation", "{settled}");
    assert_eq!(
        kinds(&settled),
        ["created", "needs_reconciliation", "late_outcome"]
    );
    let late = &settled["events"][2]["details"];
    assert_eq!(late["status"], "completed", "{settled}");
    assert_eq!(late["replica"], a.id.as_str(), "{settled}");
    let lines = all_outboxes(&replicas);
    assert_eq!(lines.len(), 1, "A sent once, late: {lines:?}");
    assert_eq!(a.outbox(), lines);
    assert_eq!(late["output"]["message_id"], lines[0]["message_id"]);
}
