//! Idempotency keys: one key runs its handler once however many ask, a key reused with
//! another input is refused, a tool's own key wins over the client's, a write settled as failed
//! releases its key, and client keys are scoped without collisions.

use super::*;

async fn fifty_concurrent_keyed_calls_run_the_handler_once(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples_with(&location, examples_config(300)).await;
    let input = json!({"to": "ann@example.com", "subject": "once", "body": "only once"});
    let requests: Vec<_> = (0..50)
        .map(|_| {
            let api: Api = server.api.clone();
            let input = input.clone();
            tokio::spawn(async move { api.call_keyed("send_email", "mail-1", input).await })
        })
        .collect();
    let mut completed = Vec::new();
    let mut in_progress = 0;
    for request in requests {
        let (status, _, retry_after, body) = request.await.unwrap();
        match status {
            StatusCode::OK => completed.push(body),
            StatusCode::CONFLICT => {
                assert_error(&body, "call_in_progress");
                assert_eq!(retry_after.as_deref(), Some("1"));
                in_progress += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(!completed.is_empty(), "the call that ran answered");
    assert_eq!(completed.len() + in_progress, 50);
    assert!(
        completed.windows(2).all(|w| w[0] == w[1]),
        "every result is the same call's"
    );
    assert_eq!(outbox(&location).len(), 1, "one handler run, one email");

    // After it finished, the same request gets the identical answer, marked as a replay.
    let (status, replayed, _, body) = server.api.call_keyed("send_email", "mail-1", input).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(body, completed[0]);
    assert_eq!(outbox(&location).len(), 1);
    server.stop().await;
}

async fn a_key_reused_with_another_input_is_refused(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let first = json!({"to": "a@example.com", "subject": "s", "body": "1"});
    let (status, replayed, _, body) = api.call_keyed("send_email", "k", first.clone()).await;
    assert_eq!((status, replayed), (StatusCode::OK, None));
    let call_id = body["call_id"].clone();

    let other = json!({"to": "a@example.com", "subject": "s", "body": "2"});
    let (status, _, _, body) = api.call_keyed("send_email", "k", other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        assert_error(&body, "idempotency_key_reused")["call_id"],
        call_id
    );
    assert_eq!(outbox(&location).len(), 1);

    // Keys are scoped to the tool: the same key on another tool is another call.
    let (status, replayed, _, _) = api.call_keyed("echo", "k", json!({"text": "x"})).await;
    assert_eq!((status, replayed), (StatusCode::OK, None));

    // A bad header is refused before anything runs.
    for bad in ["", " ", &"x".repeat(256)] {
        let (status, body) = api
            .post_raw_with(
                "/tools/echo/call",
                &[("idempotency-key", bad)],
                json!({"input": {"text": "x"}}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
    }
    server.stop().await;
}

async fn the_tools_own_key_wins_over_the_clients(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let refund = json!({"order_id": "o-17", "amount_cents": 500, "reason": "late"});
    let (status, replayed, _, first) = api.call_keyed("issue_refund", "a", refund.clone()).await;
    assert_eq!((status, replayed), (StatusCode::OK, None));
    // Another client key, same effect (`refund:o-17`): the refund is not issued twice.
    let (status, replayed, _, second) = api.call_keyed("issue_refund", "b", refund.clone()).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (StatusCode::OK, Some("true"))
    );
    assert_eq!(second, first);
    // Without any client key too.
    let (status, body) = api.call("issue_refund", refund).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, first);
    // The same order with another amount reuses the effect's key: refused.
    let (status, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-17", "amount_cents": 900, "reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&body, "idempotency_key_reused");

    let (_, record) = api
        .get(&format!("/calls/{}", first["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["idempotency_key"], "refund:o-17");
    server.stop().await;
}

async fn a_write_settled_as_failed_releases_its_key(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowCharge).unwrap();
    let config = DispatchConfig {
        defaults: ToolSettings {
            timeout: Duration::from_millis(50),
            ..ToolSettings::default()
        },
        ..DispatchConfig::default()
    };
    let server = serve(tools, &location, config).await;
    let (status, _, _, body) = server.api.call_keyed("slow_charge", "c-1", json!({})).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let first = body["call_id"].as_str().unwrap().to_owned();
    let (status, _) = server
        .api
        .post(
            &format!("/calls/{first}/resolve"),
            json!({"error": "the bank has no charge"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The effect did not happen: the same request is a new call, not a replay of the failure.
    let (status, replayed, _, body) = server.api.call_keyed("slow_charge", "c-1", json!({})).await;
    assert_eq!((status, replayed), (StatusCode::GATEWAY_TIMEOUT, None));
    assert_ne!(body["call_id"], first.as_str());
    server.stop().await;
}

#[test]
fn client_keys_are_scoped_without_collisions() {
    assert_ne!(
        client_key_scope(Some("a:b"), "c"),
        client_key_scope(Some("a"), "b:c")
    );
    assert_ne!(
        client_key_scope(Some("a"), "k"),
        client_key_scope(Some("b"), "k")
    );
    assert_ne!(
        client_key_scope(None, "k"),
        client_key_scope(Some(""), "xk")
    );
    assert_eq!(
        client_key_scope(Some("a"), "k"),
        client_key_scope(Some("a"), "k")
    );
    assert!(!client_key_scope(Some("agent"), "k").contains("agent"));
}

crate::on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn fifty_concurrent_keyed_calls_run_the_handler_once;
    #[tokio::test] async fn a_key_reused_with_another_input_is_refused;
    #[tokio::test] async fn the_tools_own_key_wins_over_the_clients;
    #[tokio::test] async fn a_write_settled_as_failed_releases_its_key;
}
