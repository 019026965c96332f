//! What survives a restart: graceful, in process, and `kill -9` of the real binary.

mod common;

use common::{Backend, Binary, Location, TestServer, assert_error, outbox, temp_dir};
use reqwest::StatusCode;
use serde_json::json;

async fn suspensions_and_finished_calls_survive_a_restart_in_process(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let (_, echo) = server.api.call("echo", json!({"text": "kept"})).await;
    let (status, ask) = server
        .api
        .call("ask_human", json!({"question": "Still there?"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, refund) = server
        .api
        .call(
            "issue_refund",
            json!({"order_id": "o-7", "amount_cents": 99_999, "reason": "lost"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    server.stop().await;

    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let (status, record) = api
        .get(&format!("/calls/{}", echo["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["output"], json!({"text": "kept"}));

    let (_, list) = api.get("/approvals").await;
    let tokens: Vec<&str> = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["token"].as_str().unwrap())
        .collect();
    let ask_token = ask["suspension"]["token"].as_str().unwrap();
    let refund_token = refund["suspension"]["token"].as_str().unwrap();
    assert_eq!(tokens, [ask_token, refund_token]);

    let (status, body) = api.approve(ask_token, json!({"answer": "yes"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"answer": "yes"}));
    let (status, body) = api.approve(refund_token, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["status"], "issued");
    server.stop().await;
}

fn a_suspension_survives_kill_9_of_the_binary_and_is_approved_after(backend: Backend) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = runtime.block_on(Location::new(backend));
    let server = Binary::start(&location, &[]);
    let api = server.api.clone();
    let (ask, email) = runtime.block_on(async {
        let (status, ask) = api
            .call("ask_human", json!({"question": "After the crash?"}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let (status, email) = api
            .call(
                "send_email",
                json!({"to": "b@example.com", "subject": "s", "body": "b"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        (ask, email)
    });
    // No graceful shutdown: what was acknowledged must already be on disk.
    server.kill();

    let server = Binary::start(&location, &[]);
    let api = server.api.clone();
    runtime.block_on(async {
        let token = ask["suspension"]["token"].as_str().unwrap();
        let (status, one) = api.get(&format!("/approvals/{token}")).await;
        assert_eq!(status, StatusCode::OK, "{one}");
        assert_eq!(one["input"], json!({"question": "After the crash?"}));

        let (status, record) = api
            .get(&format!("/calls/{}", email["call_id"].as_str().unwrap()))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(record["status"], "completed");
        assert_eq!(record["output"], email["output"]);

        let (status, body) = api.approve(token, json!({"answer": "yes"})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = api.approve(token, json!({"answer": "again"})).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_error(&body, "already_resolved");
    });
    assert_eq!(outbox(&location).len(), 1);
    assert!(server.terminate(), "SIGTERM stops the server cleanly");
}

#[test]
fn the_binary_layers_config_file_then_environment() {
    let dir = temp_dir();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, "[examples]\napproval_threshold_cents = 5\n").unwrap();
    let config_arg = config.to_str().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // The file alone: 20 cents is above its threshold of 5.
    let server = Binary::start_with(dir.path(), &["--config", config_arg], &[]);
    let refund = |api: common::Api, cents: u64| async move {
        api.call(
            "issue_refund",
            json!({"order_id": format!("o-{cents}"), "amount_cents": cents, "reason": "r"}),
        )
        .await
        .0
    };
    assert_eq!(
        runtime.block_on(refund(server.api.clone(), 20)),
        StatusCode::ACCEPTED
    );
    server.kill();

    // The environment wins over the file: now the threshold is 50.
    let server = Binary::start_with(
        dir.path(),
        &["--config", config_arg],
        &[("TOOLGATE_EXAMPLES__APPROVAL_THRESHOLD_CENTS", "50")],
    );
    assert_eq!(
        runtime.block_on(refund(server.api.clone(), 21)),
        StatusCode::OK
    );
    assert_eq!(
        runtime.block_on(refund(server.api.clone(), 51)),
        StatusCode::ACCEPTED
    );
}

#[test]
fn a_bad_config_stops_the_start_naming_the_key() {
    let dir = temp_dir();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[examples]\nsend_email_delay = 5\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("send_email_delay"), "{stderr}");

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("TOOLGATE_EXAMPLES__APPROVAL_THRESHOLD_CENTS", "lots")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("examples.approval_threshold_cents"),
        "{stderr}"
    );
}

crate::on_each_backend! {
    #[tokio::test] async fn suspensions_and_finished_calls_survive_a_restart_in_process;
    #[test] fn a_suspension_survives_kill_9_of_the_binary_and_is_approved_after;
}
