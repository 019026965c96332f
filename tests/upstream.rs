//! Upstream MCP servers behind toolgate: a real MCP server written with the official Python SDK
//! (`tests/upstream/server.py`), over stdio and over Streamable HTTP, served by the real binary.
//! Every run of an upstream tool is a line in the server's `runs.log`, so a test counts what
//! reached the server, not what toolgate says it sent.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use common::upstream::{
    HttpUpstream, descriptor, free_port, mcp_tools, runs, server_script, starts, tool_names,
};
use common::{
    Api, Backend, Binary, Location, Site, assert_error, ci_python, eventually, mcp_request_as,
    temp_dir,
};

/// A config file in `dir` with `body`, and the arguments that point the binary at it.
fn config_file(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, body).unwrap();
    path
}

/// `[[upstreams]]` for the stdio server, recording in `upstream_dir`, then `extra`.
fn stdio_upstream(upstream_dir: &Path, extra: &str) -> String {
    format!(
        "[[upstreams]]\nname = \"files\"\ncommand = [{python:?}, {script:?}, \"--transport\", \
         \"stdio\", \"--dir\", {dir:?}]\n{extra}\n",
        python = ci_python().to_str().unwrap(),
        script = server_script().to_str().unwrap(),
        dir = upstream_dir.to_str().unwrap(),
    )
}

fn http_upstream(url: &str, extra: &str) -> String {
    format!("[[upstreams]]\nname = \"web\"\nurl = {url:?}\n{extra}\n")
}

/// The binary serving the examples and `config`, on the store at `at` (a bare directory is
/// SQLite in it).
fn serve(at: &(impl Site + ?Sized), config: &str) -> Binary {
    let path = config_file(at.data_dir(), config);
    Binary::start_with(at, &["--config", path.to_str().unwrap()], &[])
}

#[tokio::test]
async fn a_stdio_servers_tools_are_served_on_every_door() {
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), &stdio_upstream(upstream.path(), ""));
    let api = &server.api;

    let names = tool_names(api).await;
    for name in [
        "files__echo",
        "files__write_file",
        "files__slow_write",
        "files__fail",
        "files__plain",
        "files__lookup",
        "files__grow",
        "files__traced",
        "files__rug",
        "echo",
    ] {
        assert!(names.contains(&name.to_owned()), "{name} in {names:?}");
    }
    // Effects from the annotations; without any, a write.
    let echo = descriptor(api, "files__echo").await;
    assert_eq!(echo["effect"], "read");
    assert_eq!(echo["description"], "Echoes the text back.");
    assert_eq!(echo["input_schema"]["properties"]["text"]["type"], "string");
    assert_eq!(
        echo["output_schema"]["properties"]["text"]["type"],
        "string"
    );
    assert_eq!(
        descriptor(api, "files__write_file").await["effect"],
        "write"
    );

    // OpenAPI has an operation per upstream tool, with its input schema.
    let (status, openapi) = api.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        openapi["paths"]["/tools/files__write_file/call"]["post"].is_object(),
        "{}",
        openapi["paths"]
    );
    // The provider formats and /mcp list them too.
    let (_, openai) = api.get("/tools?format=openai").await;
    assert!(
        openai["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|tool| tool["function"]["name"] == "files__lookup")
    );
    let listed = mcp_tools(api).await;
    // And /mcp calls them through the same lifecycle.
    let params = json!({"name": "files__lookup", "arguments": {"key": "k"}});
    let (_, _, answer) = mcp_request_as(api, None, "tools/call", params).await;
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"key": "k", "value": "K"}),
        "{answer}"
    );
    let write = listed
        .iter()
        .find(|tool| tool["name"] == "files__write_file")
        .expect("files__write_file over /mcp");
    assert_eq!(write["annotations"]["destructiveHint"], true);

    // A call goes upstream: structured content is the output; text without it is a string.
    let (status, body) = api.call("files__echo", json!({"text": "hi"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"text": "hi"}));
    let (status, body) = api.call("files__plain", json!({"text": "x"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], "plain: x");
    // isError is the tool failing, with the upstream's text.
    let (status, body) = api
        .call("files__fail", json!({"message": "disk on fire"}))
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(assert_error(&body, "tool_failed")["status"], "failed");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disk on fire")
    );
    // Input that does not fit the upstream's schema never reaches it.
    let (status, body) = api.call("files__echo", json!({"txt": "hi"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_error(&body, "invalid_input");
    assert_eq!(runs(upstream.path(), "echo"), 1);
    assert_eq!(runs(upstream.path(), "fail"), 1);

    // At INFO the connect is one short line of ours; the SDK's own lines (its long one of the
    // server's whole handshake answer) are left out.
    let log = server.log();
    let up: Vec<&String> = log
        .iter()
        .filter(|line| line.contains("the upstream MCP server is up"))
        .collect();
    assert_eq!(up.len(), 1, "{log:#?}");
    assert!(up[0].contains("upstream=\"files\" tools=10"), "{up:?}");
    assert!(!log.iter().any(|line| line.contains("rmcp")), "{log:#?}");
}

async fn a_gated_write_reaches_the_server_only_when_approved_and_once(backend: Backend) {
    let data = Location::new(backend).await;
    let upstream = temp_dir();
    let policy = "[upstreams.policies.write_file]\nrequire_approval = true\n";
    let server = serve(&data, &stdio_upstream(upstream.path(), policy));
    let api = &server.api;
    let input = json!({"path": "notes.txt", "content": "hello"});

    let (status, body) = api.call("files__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        body["suspension"]["reason"],
        "Calls of files__write_file need approval."
    );
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    // Nothing reached the upstream before the decision.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs(upstream.path(), "write_file"), 0);
    assert!(!upstream.path().join("files/notes.txt").exists());

    // The approver's answer must fit the default schema, `{"note"?: string}`.
    let (status, body) = api.approve(&token, json!({"note": 5})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(runs(upstream.path(), "write_file"), 0);

    let (status, body) = api.approve(&token, json!({"note": "fine"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"path": "notes.txt", "bytes": 5}));
    assert_eq!(runs(upstream.path(), "write_file"), 1);
    assert_eq!(
        std::fs::read_to_string(upstream.path().join("files/notes.txt")).unwrap(),
        "hello"
    );
    let (status, body) = api.approve(&token, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_error(&body, "already_resolved");
    assert_eq!(runs(upstream.path(), "write_file"), 1);

    // A rejected call never reaches it.
    let (status, body) = api.call("files__write_file", input).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let token = body["suspension"]["token"].as_str().unwrap();
    let (status, body) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "no"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "rejected");
    assert_eq!(runs(upstream.path(), "write_file"), 1);
}

#[tokio::test]
async fn a_native_tool_gated_by_configuration_runs_with_the_approvers_input() {
    let data = temp_dir();
    let config = "[tools.echo]\nrequire_approval = true\napproval_schema = { type = \"object\", \
                  required = [\"ticket\"], properties = { ticket = { type = \"string\" } } }\n";
    let server = serve(data.path(), config);
    let api = &server.api;
    let (status, body) = api.call("echo", json!({"text": "hi"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["suspension"]["reason"], "Calls of echo need approval.");
    assert_eq!(
        body["suspension"]["input_schema"]["required"],
        json!(["ticket"])
    );
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let (status, body) = api.approve(&token, json!({"note": "x"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = api.approve(&token, json!({"ticket": "T-1"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["text"], "hi");
}

#[tokio::test]
async fn an_idempotency_key_template_runs_the_upstream_once() {
    let data = temp_dir();
    let upstream = temp_dir();
    let policy = "[upstreams.policies.write_file]\nidempotency_key = \"write:{path}\"\n";
    let server = serve(data.path(), &stdio_upstream(upstream.path(), policy));
    let api = &server.api;
    let input = json!({"path": "a.txt", "content": "one"});

    let (status, first) = api.call("files__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let response = api
        .client
        .post(format!("{}/tools/files__write_file/call", api.base))
        .json(&json!({"input": input}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let second: Value = response.json().await.unwrap();
    assert_eq!(second["call_id"], first["call_id"]);
    assert_eq!(runs(upstream.path(), "write_file"), 1);

    // The same key with another input is refused, not run.
    let (status, body) = api
        .call(
            "files__write_file",
            json!({"path": "a.txt", "content": "two"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_error(&body, "idempotency_key_reused");
    // Another path is another key.
    let (status, _) = api
        .call(
            "files__write_file",
            json!({"path": "b.txt", "content": "two"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs(upstream.path(), "write_file"), 2);
}

async fn kill_9_during_a_slow_upstream_write_needs_reconciliation_and_is_not_repeated(
    backend: Backend,
) {
    let data = Location::new(backend).await;
    let upstream_dir = temp_dir();
    let upstream = HttpUpstream::start(upstream_dir.path(), free_port()).await;
    let config = http_upstream(&upstream.url(), "");
    let server = serve(&data, &config);
    let api = server.api.clone();

    let call = tokio::spawn(async move {
        api.client
            .post(format!("{}/tools/web__slow_write/call", api.base))
            .json(&json!({"input": {"path": "slow.txt", "ms": 1500}}))
            .send()
            .await
    });
    // The upstream logs the run on receipt, then sleeps: kill toolgate mid-write.
    eventually("the slow write reached the upstream", async || {
        (runs(upstream_dir.path(), "slow_write") == 1).then_some(())
    })
    .await;
    server.kill();
    assert!(call.await.unwrap().is_err(), "the killed server answered");
    // The upstream finishes its write on its own.
    tokio::time::sleep(Duration::from_millis(1700)).await;

    let server = serve(&data, &config);
    let (status, list) = server.api.get("/calls?tool=web__slow_write").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let calls = list["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{list}");
    let call_id = calls[0]["call_id"].as_str().unwrap().to_owned();
    // SQLite settles it as it opens; on PostgreSQL the live replica sweeps the dead one's lease.
    let call = backend.recovered(&server.api, &call_id).await;
    assert_eq!(call["status"], "needs_reconciliation", "{call}");
    // Nothing ran it again: not the restart, not a while after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs(upstream_dir.path(), "slow_write"), 1);
    // The person settles it.
    let (status, body) = server
        .api
        .post(
            &format!("/calls/{call_id}/resolve"),
            json!({"output": {"path": "slow.txt"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
}

#[tokio::test]
async fn a_killed_stdio_server_is_restarted_and_served_again() {
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), &stdio_upstream(upstream.path(), ""));
    let api = &server.api;
    let (status, _) = api.call("files__echo", json!({"text": "before"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(starts(upstream.path(), "stdio"), 1);

    let pid = std::fs::read_to_string(upstream.path().join("pid-stdio")).unwrap();
    let killed = Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());

    let answer = eventually("the stdio server is back and answers", async || {
        let (status, body) = api.call("files__echo", json!({"text": "after"})).await;
        match status {
            StatusCode::OK => Some(body),
            // While it is down: refused before anything is recorded or sent.
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_error(&body, "upstream_unavailable");
                None
            }
            other => panic!("unexpected {other}: {body}"),
        }
    })
    .await;
    assert_eq!(answer["output"], json!({"text": "after"}));
    assert_eq!(starts(upstream.path(), "stdio"), 2);
    assert!(tool_names(api).await.contains(&"files__echo".to_owned()));
}

#[tokio::test]
async fn an_http_server_that_is_down_answers_503_and_is_found_again() {
    let data = temp_dir();
    let upstream_dir = temp_dir();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    // Down at start: toolgate starts anyway, without its tools.
    let server = serve(data.path(), &http_upstream(&url, ""));
    let api = &server.api;
    let (status, body) = api.call("web__echo", json!({"text": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error(&body, "unknown_tool");

    // Up: its tools appear.
    let mut upstream = HttpUpstream::start(upstream_dir.path(), port).await;
    eventually("the HTTP upstream's tools appear", async || {
        tool_names(api)
            .await
            .contains(&"web__echo".to_owned())
            .then_some(())
    })
    .await;
    let (status, body) = api.call("web__echo", json!({"text": "up"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Down again: its tools stay listed, and answer 503 with a Retry-After.
    upstream.kill();
    let response = api
        .client
        .post(format!("{}/tools/web__echo/call", api.base))
        .json(&json!({"input": {"text": "down"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_error(&body, "upstream_unavailable");
    let (status, body) = api.call("web__echo", json!({"text": "still down"})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error(&body, "upstream_unavailable");
    assert!(tool_names(api).await.contains(&"web__echo".to_owned()));

    // Back: served again.
    upstream.restart().await;
    let answer = eventually("the HTTP upstream answers again", async || {
        let (status, body) = api.call("web__echo", json!({"text": "again"})).await;
        (status == StatusCode::OK).then_some(body)
    })
    .await;
    assert_eq!(answer["output"], json!({"text": "again"}));
}

#[tokio::test]
async fn a_write_to_an_http_server_that_is_down_is_released_not_reconciled() {
    let data = temp_dir();
    let upstream_dir = temp_dir();
    let mut upstream = HttpUpstream::start(upstream_dir.path(), free_port()).await;
    let server = serve(data.path(), &http_upstream(&upstream.url(), ""));
    let api = &server.api;
    let input = json!({"path": "w.txt", "content": "x"});
    let (status, body) = api.call("web__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Down, and toolgate not told: the write's connection is refused, so it provably never
    // left. It is released (interrupted), not left for a person to reconcile.
    upstream.kill();
    let (status, body) = api.call("web__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error(&body, "upstream_unavailable");
    let (_, list) = api.get("/calls?tool=web__write_file").await;
    let statuses: Vec<&str> = list["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["status"].as_str().unwrap())
        .collect();
    assert!(!statuses.contains(&"needs_reconciliation"), "{statuses:?}");
    assert_eq!(runs(upstream_dir.path(), "write_file"), 1);
}

#[tokio::test]
async fn an_approval_given_while_the_server_is_down_runs_once_it_is_back() {
    let data = temp_dir();
    let upstream_dir = temp_dir();
    let mut upstream = HttpUpstream::start(upstream_dir.path(), free_port()).await;
    let policy = "[upstreams.policies.write_file]\nrequire_approval = true\n";
    let server = serve(data.path(), &http_upstream(&upstream.url(), policy));
    let api = &server.api;
    let (status, body) = api
        .call(
            "web__write_file",
            json!({"path": "late.txt", "content": "ok"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();

    // Approved while the server is down: 503 with Retry-After, and nothing ran.
    upstream.kill();
    let (status, body) = api.approve(&token, json!({"note": "go"})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(runs(upstream_dir.path(), "write_file"), 0);

    // Approved again once it is back: it runs, once (whether the first approval was refused
    // before it was taken, or taken and its run released).
    upstream.restart().await;
    let answer = eventually("the approval runs once the server is back", async || {
        let (status, body) = api.approve(&token, json!({"note": "go"})).await;
        match status {
            StatusCode::OK => Some(body),
            StatusCode::SERVICE_UNAVAILABLE => None,
            other => panic!("unexpected {other}: {body}"),
        }
    })
    .await;
    assert_eq!(answer["output"], json!({"path": "late.txt", "bytes": 2}));
    assert_eq!(runs(upstream_dir.path(), "write_file"), 1);
    let (status, body) = api.approve(&token, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(runs(upstream_dir.path(), "write_file"), 1);
}

/// Asks the upstream served as `prefix` to add a tool, and checks that it is served once the
/// server says its list changed.
async fn grows_a_tool(api: &Api, prefix: &str) {
    let extra = format!("{prefix}__extra");
    assert!(!tool_names(api).await.contains(&extra));
    let (status, body) = api
        .call(&format!("{prefix}__grow"), json!({"name": "extra"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually(&format!("{extra} is listed"), async || {
        tool_names(api).await.contains(&extra).then_some(())
    })
    .await;
    let listed = mcp_tools(api).await;
    assert!(listed.iter().any(|tool| tool["name"] == extra.as_str()));
    let (status, body) = api.call(&extra, json!({"text": "new"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"text": "new", "tool": "extra"}));
}

#[tokio::test]
async fn a_tool_added_upstream_appears_after_list_changed() {
    let data = temp_dir();
    let upstream = temp_dir();
    // Pinned as it appears (by default, a tool new after the first connection is held).
    let pin = "on_new_tool = \"pin\"";
    let server = serve(data.path(), &stdio_upstream(upstream.path(), pin));
    grows_a_tool(&server.api, "files").await;
}

#[tokio::test]
async fn a_tool_added_upstream_appears_after_list_changed_over_http() {
    let data = temp_dir();
    let upstream_dir = temp_dir();
    let upstream = HttpUpstream::start(upstream_dir.path(), free_port()).await;
    let pin = "on_new_tool = \"pin\"";
    let server = serve(data.path(), &http_upstream(&upstream.url(), pin));
    grows_a_tool(&server.api, "web").await;
}

/// The binary with `config`, expected to refuse to start; its log.
fn refused_start(data: &Path, config: &str) -> String {
    let path = config_file(data, config);
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .arg("--config")
        .arg(&path)
        .env_remove("TOOLGATE_TEST_UNSET_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "the server started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_missing_variable_or_a_bad_entry_stops_the_start_naming_it() {
    let data = temp_dir();
    let log = refused_start(
        data.path(),
        &http_upstream(
            "http://127.0.0.1:9/mcp",
            "headers = { Authorization = \"Bearer ${TOOLGATE_TEST_UNSET_TOKEN}\" }",
        ),
    );
    assert!(log.contains("TOOLGATE_TEST_UNSET_TOKEN"), "{log}");
    assert!(log.contains("upstreams[0].headers.Authorization"), "{log}");

    let log = refused_start(data.path(), "[[upstreams]]\nname = \"both\"\n");
    assert!(log.contains("upstreams[0].command"), "{log}");

    let log = refused_start(
        data.path(),
        "[[upstreams]]\nname = \"gone\"\ncommand = [\"/nonexistent/mcp-server\"]\n",
    );
    assert!(log.contains("upstream `gone` could not start"), "{log}");
}

on_each_backend! {
    #[tokio::test] async fn a_gated_write_reaches_the_server_only_when_approved_and_once;
    #[tokio::test] async fn kill_9_during_a_slow_upstream_write_needs_reconciliation_and_is_not_repeated;
}
