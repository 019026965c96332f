//! One approval seen by every replica: made on one, listed and approved on another, read on a
//! third; two replicas approving one token at once have exactly one winner.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_made_on_one_replica_is_listed_and_approved_on_another_and_read_on_a_third() {
    const CALLER: &str = "orchestrator-token-replicas";
    const APPROVER: &str = "finance-ops-token-replicas";
    let db = TestDb::create().await;
    let config_dir = temp_dir();
    let config = config_dir.path().join("toolgate.toml");
    let key = |name: &str, role: &str, token: &str| {
        let hash = hex::encode(toolgate::http::auth::token_sha256(token));
        format!("[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n")
    };
    std::fs::write(
        &config,
        key("orchestrator", "caller", CALLER) + &key("finance-ops", "approver", APPROVER),
    )
    .unwrap();
    let replicas = start_replicas(&db.url, 3, &["--config", config.to_str().unwrap()], &[]).await;
    let [a, b, c] = &replicas[..] else {
        unreachable!()
    };

    let asked = call(
        &a.api_as(CALLER),
        "ask_human",
        None,
        &json!({"question": "Ship the release?"}),
    )
    .await
    .unwrap();
    assert_eq!(asked.status, StatusCode::ACCEPTED, "{:?}", asked.body);
    assert_eq!(asked.body["status"], "suspended");
    let call_id = asked.body["call_id"].as_str().unwrap();
    let token = asked.body["suspension"]["token"].as_str().unwrap();

    let approver = b.api_as(APPROVER);
    let (status, queue) = approver.get("/approvals").await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    let listed = queue["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|approval| approval["token"] == token)
        .unwrap_or_else(|| panic!("the suspension made on A is listed on B: {queue}"));
    assert_eq!(listed["call_id"], call_id);
    assert_eq!(listed["tool"], "ask_human");
    assert_eq!(listed["reason"], "Ship the release?");

    let (status, approved) = approver
        .approve(token, json!({"answer": "yes, ship it"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "completed");
    assert_eq!(approved["output"], json!({"answer": "yes, ship it"}));

    // The caller reads its own call on a third replica.
    let done = record(&c.api_as(CALLER), call_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"answer": "yes, ship it"}));
    assert_eq!(done["caller"], "orchestrator");
    assert_eq!(kinds(&done), APPROVED_HISTORY);
    let approval = &done["events"][2];
    assert_eq!(approval["actor"], "finance-ops", "{done}");
    assert_eq!(done["attempts"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_approvals_of_one_token_on_two_replicas_have_exactly_one_winner() {
    const TOKENS: usize = 20;
    let db = TestDb::create().await;
    let replicas = start_replicas(&db.url, 3, &[], &[]).await;
    let [a, b, c] = &replicas[..] else {
        unreachable!()
    };

    // Refunds above the approval threshold (10,000 cents) suspend; approved, they are issued.
    let mut suspended = Vec::new();
    for i in 0..TOKENS {
        let refund =
            json!({"order_id": format!("o-{i}"), "amount_cents": 25_000, "reason": "damaged"});
        let answer = call(&a.api, "issue_refund", None, &refund).await.unwrap();
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{:?}", answer.body);
        let call_id = answer.body["call_id"].as_str().unwrap().to_owned();
        let token = answer.body["suspension"]["token"]
            .as_str()
            .unwrap()
            .to_owned();
        suspended.push((call_id, token));
    }

    // Every approval of every token at once: B and C approve each.
    let start = Arc::new(tokio::sync::Barrier::new(2 * TOKENS));
    let mut races = Vec::new();
    for (index, (_, token)) in suspended.iter().enumerate() {
        for replica in [b, c] {
            let (api, token, start) = (replica.api.clone(), token.clone(), start.clone());
            let (name, note) = (replica.name, json!({"note": "refund it"}));
            races.push(tokio::spawn(async move {
                start.wait().await;
                let (status, body) = api.approve(&token, note).await;
                (index, (name, status, body))
            }));
        }
    }
    let mut answers: Vec<Vec<(&str, StatusCode, Value)>> = vec![Vec::new(); TOKENS];
    for race in races {
        let (index, answer) = race.await.unwrap();
        answers[index].push(answer);
    }

    let mut winners = Vec::new();
    for ((call_id, _), answers) in suspended.iter().zip(&answers) {
        let won: Vec<_> = answers
            .iter()
            .filter(|(_, status, _)| *status == StatusCode::OK)
            .collect();
        assert_eq!(won.len(), 1, "one winner for {call_id}: {answers:?}");
        let (winner, _, body) = won[0];
        assert_eq!(body["status"], "completed", "{body}");
        assert_eq!(body["output"]["status"], "issued", "{body}");
        winners.push(*winner);
        let (_, status, lost) = answers
            .iter()
            .find(|(_, status, _)| *status != StatusCode::OK)
            .unwrap();
        assert_eq!(*status, StatusCode::CONFLICT, "{lost}");
        assert_eq!(
            assert_error(lost, "already_resolved")["call_id"],
            call_id.as_str()
        );

        // The tool ran again once: its first attempt suspended, the second issued the refund.
        let done = record(&a.api, call_id).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["attempts"], 2, "{done}");
        assert_eq!(kinds(&done), APPROVED_HISTORY);
    }
    println!("the winners of {TOKENS} races: {}", winners.concat());
}
