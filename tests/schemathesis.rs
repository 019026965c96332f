//! The API against its own document: schemathesis (`.ci/requirements.txt`) generates requests
//! from `/openapi.json`, valid and invalid, and runs every one of its checks on the answers; and
//! the request it once found, a rejection whose body is not an object, over HTTP.

mod common;

use std::process::Command;

use common::{Backend, Location, TestServer, assert_error, repo_root, temp_dir};
use reqwest::StatusCode;
use serde_json::json;
use toolgate::ToolSet;
use toolgate::http::auth::{ApiKey, Role, token_sha256};

/// The key schemathesis sends: an admin's, which every operation admits.
const ADMIN: &str = "schemathesis-admin-token";

/// A rejection whose body is valid JSON but not the object the document describes (an array,
/// which serde would read as the fields in order; a string; a `reason` of the wrong type) is
/// `400 bad_request`, and the call stays suspended: a well-formed rejection still goes through.
async fn a_reject_body_that_is_not_the_documented_object_is_refused(backend: Backend) {
    let at = Location::new(backend).await;
    let server = TestServer::examples(&at).await;
    let api = &server.api;
    let (status, asked) = api.call("ask_human", json!({"question": "Ship it?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    let call_id = asked["call_id"].as_str().unwrap();
    let token = asked["suspension"]["token"].as_str().unwrap();
    let reject = format!("/approvals/{token}/reject");
    for body in [
        json!([]),
        json!(["No."]),
        json!([null, null]),
        json!("x"),
        json!(null),
        json!(5),
        json!({"reason": 5}),
        json!({"option": ["a"]}),
    ] {
        let (status, answer) = api.post(&reject, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_error(&answer, "bad_request");
    }
    let (status, call) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call["status"], "suspended", "{call}");
    let (status, pending) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK, "still pending: {pending}");

    let (status, call) = api.post(&reject, json!({"reason": "No."})).await;
    assert_eq!(status, StatusCode::OK, "{call}");
    assert_eq!(call["status"], "rejected", "{call}");
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn a_reject_body_that_is_not_the_documented_object_is_refused;
}

/// The example tools, behind one admin key, so that every operation needs the bearer token its
/// document declares, and schemathesis's `ignored_auth` check has something to check.
async fn keyed_examples(at: &std::path::Path) -> TestServer {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), at).unwrap();
    let key = ApiKey::new("schemathesis", Role::Admin, token_sha256(ADMIN));
    TestServer::start_with(tools, at, |builder| builder.api_keys(vec![key])).await
}

/// Runs schemathesis on the document of a server of the example tools, with every check and a
/// bounded number of examples per operation, and a fixed seed so that a failure is
/// reproducible; what it says is in the panic when it finds anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_with_every_check() {
    let dir = temp_dir();
    let server = keyed_examples(dir.path()).await;
    let reports = dir.path().join("schemathesis-report");
    let schemathesis = repo_root().join(".ci/venv/bin/schemathesis");
    assert!(
        schemathesis.exists(),
        "schemathesis is not installed: run `bash .ci/test-deps`"
    );
    let mut command = Command::new(schemathesis);
    command
        .current_dir(dir.path())
        .arg("--config-file")
        .arg(repo_root().join("tests/schemathesis.toml"))
        .arg("run")
        .arg(format!("{}/openapi.json", server.api.base))
        .args(["--checks", "all", "--max-examples", "15", "--seed", "34"])
        // One worker: with two, the coverage phase's threads parse Python source at once
        // (hypothesis describing a lambda), and CPython 3.11's `ast` may then fail with
        // "AST constructor recursion depth mismatch", a runtime error of the tool that fails
        // the run (seen on two of a few runs).
        .args([
            "--workers",
            "1",
            "--no-color",
            "--generation-database",
            "none",
        ])
        .args(["--header", &format!("Authorization: Bearer {ADMIN}")])
        .arg("--report-dir")
        .arg(&reports)
        .env("NO_COLOR", "1");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("schemathesis runs");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found something:\n{said}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // It tested every operation it found in the document, and found them all.
    let count = |label: &str| {
        said.lines()
            .find_map(|line| line.trim().strip_prefix(label))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no {label:?} in\n{said}"))
    };
    let selected = count("Selected: ");
    let (selected, total) = selected.split_once('/').unwrap();
    assert_eq!(selected, total, "{said}");
    assert_eq!(count("Tested: "), total, "{said}");
    assert!(total.parse::<usize>().unwrap() > 20, "{said}");
    server.stop().await;
}
