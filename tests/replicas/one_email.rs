//! One idempotency key sends one email however many replicas are asked.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_called_fifty_times_across_three_replicas_sends_one_email() {
    const CALLS: usize = 50;
    let db = TestDb::create().await;
    let replicas = start_replicas(&db.url, 3, &[], &[(SEND_EMAIL_DELAY, "300")]).await;

    let start = Arc::new(tokio::sync::Barrier::new(CALLS));
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let (api, start) = (replicas[i % replicas.len()].api.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                call(&api, "send_email", Some("invoice-42"), &email("invoice"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let (mut sent, mut in_progress) = (Vec::new(), 0);
    for answer in calls {
        let answer = answer.await.unwrap();
        match answer.status {
            StatusCode::OK => sent.push(answer.body["call_id"].as_str().unwrap().to_owned()),
            StatusCode::CONFLICT => {
                assert_error(&answer.body, "call_in_progress");
                assert!(answer.retry_after.is_some(), "{answer:?}");
                in_progress += 1;
            }
            _ => panic!("neither the result nor call_in_progress: {answer:?}"),
        }
    }
    println!(
        "{} answered the result, {in_progress} call_in_progress",
        sent.len()
    );
    assert!(!sent.is_empty(), "the call that ran was answered");
    sent.dedup();
    assert_eq!(sent.len(), 1, "one call for the key: {sent:?}");
    let call_id = &sent[0];

    // Replayed on every replica: the same call, not a second email.
    for replica in &replicas {
        let (status, replayed, _, body) = replica
            .api
            .call_keyed("send_email", "invoice-42", email("invoice"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["call_id"], call_id.as_str());
        assert_eq!(replayed.as_deref(), Some("true"), "{body}");
    }
    let lines = all_outboxes(&replicas);
    assert_eq!(lines.len(), 1, "one email in all: {lines:?}");
    assert_eq!(lines[0]["call_id"], call_id.as_str());
}
