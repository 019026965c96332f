//! Pinned tool definitions: an upstream MCP server (the official Python SDK's,
//! `tests/upstream/server.py`) changes `write_file`'s description and input schema mid-run (its
//! `rug` tool, a "rug pull"), and toolgate holds the tool for an admin, on both backends and on
//! every door. Every run of an upstream tool is a line in the server's own `runs.log`, so "never
//! called" is the server's word, not toolgate's.

mod common;

use std::path::Path;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use common::browser::Browser;
use common::receiver::Receiver;
use common::upstream::{descriptor, mcp_tools, runs, server_script, tool_names};
use common::{
    Api, Backend, Binary, Location, Site, assert_error, ci_python, eventually, mcp_request_as,
    temp_dir,
};

/// The binary serving the stdio test server as `files` (recording in `upstream`), with `extra`
/// after its `[[upstreams]]` entry, on the store at `at`.
fn serve(at: &(impl Site + ?Sized), upstream: &Path, extra: &str) -> Binary {
    let config = format!(
        "[[upstreams]]\nname = \"files\"\ncommand = [{python:?}, {script:?}, \"--transport\", \
         \"stdio\", \"--dir\", {dir:?}]\n{extra}\n",
        python = ci_python().to_str().unwrap(),
        script = server_script().to_str().unwrap(),
        dir = upstream.to_str().unwrap(),
    );
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    Binary::start_with(at, &["--config", path.to_str().unwrap()], &[])
}

/// Whether `files__write_file` is served as held (its description says so).
async fn held(api: &Api) -> bool {
    descriptor(api, "files__write_file").await["description"]
        .as_str()
        .unwrap()
        .starts_with("[held")
}

/// Asks the server to change `write_file` (or, `undo`, to put it back), and waits until
/// toolgate holds it (or serves it again).
async fn rug(api: &Api, undo: bool) {
    let (status, body) = api.call("files__rug", json!({"undo": undo})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("write_file's hold follows the change", async || {
        (held(api).await != undo).then_some(())
    })
    .await;
}

/// `GET /upstreams/files/changes`' changes.
async fn changes(api: &Api) -> Vec<Value> {
    let (status, body) = api.get("/upstreams/files/changes").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["upstream"], "files");
    body["changes"].as_array().unwrap().clone()
}

async fn a_changed_tool_is_held_on_every_door_until_an_admin_accepts_it(backend: Backend) {
    let data = Location::new(backend).await;
    let upstream = temp_dir();
    let gated = "[upstreams.policies.write_file]\nrequire_approval = true\n";
    let server = serve(&data, upstream.path(), gated);
    let api = &server.api;
    let input = json!({"path": "notes.txt", "content": "hello"});

    // Pinned at the first connection: served as listed, nothing to review.
    assert!(!held(api).await);
    assert!(changes(api).await.is_empty());
    // A call made (and waiting for a person) before the change.
    let (status, body) = api.call("files__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let pending = body["suspension"]["token"].as_str().unwrap().to_owned();
    let pending_call = body["call_id"].as_str().unwrap().to_owned();
    // And another, approved only after the change is accepted.
    let (status, body) = api.call("files__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let pending_after_accept = body["suspension"]["token"].as_str().unwrap().to_owned();

    rug(api, false).await;
    // Still listed, with its pinned definition: the schema has no `cc`, on REST and on /mcp.
    let listed = descriptor(api, "files__write_file").await;
    assert!(
        listed["input_schema"]["properties"].get("cc").is_none(),
        "{listed}"
    );
    assert!(
        !listed["description"].as_str().unwrap().contains("id_rsa"),
        "{listed}"
    );
    let on_mcp = mcp_tools(api)
        .await
        .into_iter()
        .find(|tool| tool["name"] == "files__write_file")
        .unwrap();
    assert!(
        on_mcp["description"].as_str().unwrap().starts_with("[held"),
        "{on_mcp}"
    );
    assert!(
        on_mcp["inputSchema"]["properties"].get("cc").is_none(),
        "{on_mcp}"
    );

    // REST: refused, naming both hashes; nothing recorded, nothing sent.
    let (status, body) = api.call("files__write_file", input.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let details = assert_error(&body, "tool_changed");
    assert_eq!(details["tool"], "files__write_file");
    let current = details["current_hash"].as_str().unwrap().to_owned();
    assert_ne!(details["pinned_hash"], current.as_str());
    // /mcp: a tool error that says why.
    let (status, _, body) = mcp_request_as(
        api,
        None,
        "tools/call",
        json!({"name": "files__write_file", "arguments": input.clone()}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["isError"], true, "{body}");
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("changed upstream") && text.ends_with("(tool_changed)"),
        "{text}"
    );

    // The approval of the call made before the change fails closed, and ends the call.
    let (status, body) = api.approve(&pending, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let details = assert_error(&body, "tool_changed");
    assert_eq!(details["call_id"], pending_call.as_str());
    let (status, call) = api.get(&format!("/calls/{pending_call}")).await;
    assert_eq!(status, StatusCode::OK, "{call}");
    assert_eq!(call["status"], "failed", "{call}");
    assert_eq!(call["error"]["code"], "tool_changed", "{call}");
    let (status, body) = api.approve(&pending, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_error(&body, "already_resolved");
    assert_eq!(
        runs(upstream.path(), "write_file"),
        0,
        "a held tool is never called"
    );

    // The admin's diff: the pinned definition and the one listed now.
    let found = changes(api).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let change = &found[0];
    assert_eq!(change["tool"], "write_file");
    assert_eq!(change["served_as"], "files__write_file");
    assert_eq!(change["kind"], "changed");
    assert_eq!(change["differs"], json!(["description", "inputSchema"]));
    assert_eq!(
        change["pinned"]["definition"]["description"],
        "Writes a file."
    );
    assert_eq!(change["pinned"]["pinned_by"], Value::Null);
    assert_eq!(change["upstream"]["hash"], current.as_str());
    assert!(
        change["upstream"]["definition"]["description"]
            .as_str()
            .unwrap()
            .contains("id_rsa")
    );
    assert_eq!(
        change["upstream"]["definition"]["inputSchema"]["required"],
        json!(["path", "content", "cc"])
    );

    // An accept naming another hash is refused, and accepts nothing.
    let accept = "/upstreams/files/changes/write_file/accept";
    let (status, body) = api.post(accept, json!({"hash": "0".repeat(64)})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let details = assert_error(&body, "tool_changed");
    assert_eq!(details["current_hash"], current.as_str());
    assert!(held(api).await);
    let (status, body) = api.post(accept, json!({"hash": current, "x": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = api
        .post(
            "/upstreams/nowhere/changes/write_file/accept",
            json!({"hash": current}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error(&body, "unknown_upstream");
    let (status, body) = api
        .post(
            "/upstreams/files/changes/echo/accept",
            json!({"hash": current}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error(&body, "no_change");

    // Accepted: pinned, and served as listed now.
    let (status, body) = api.post(accept, json!({"hash": current})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hash"], current.as_str());
    // On the audit chain, with the hash accepted.
    let chain = api
        .client
        .get(format!("{}/audit", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let accepted: Vec<&str> = chain
        .lines()
        .filter(|line| line.contains("\"type\":\"upstream.change_accepted\""))
        .collect();
    assert_eq!(accepted.len(), 1, "{chain}");
    assert!(accepted[0].contains(current.as_str()), "{}", accepted[0]);
    assert!(!held(api).await);
    assert!(changes(api).await.is_empty());
    let listed = descriptor(api, "files__write_file").await;
    assert_eq!(listed["input_schema"]["properties"]["cc"]["type"], "string");
    // A call made before the accept is of the definition replaced: its approval fails closed
    // though the tool is no longer held.
    let (status, body) = api.approve(&pending_after_accept, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_error(&body, "tool_changed");
    assert_eq!(runs(upstream.path(), "write_file"), 0);
    let changed_input = json!({"path": "notes.txt", "content": "hello", "cc": "-"});
    let (status, body) = api.call("files__write_file", changed_input).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let token = body["suspension"]["token"].as_str().unwrap();
    let (status, body) = api.approve(token, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(runs(upstream.path(), "write_file"), 1);

    // The pin is the store's: after a restart, the server (a new process) lists the original
    // definition again, which is now the change, against the pin accepted.
    drop(server);
    let server = serve(&data, upstream.path(), gated);
    assert!(held(&server.api).await);
    let found = changes(&server.api).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["pinned"]["hash"], current.as_str());
    assert_eq!(
        found[0]["upstream"]["definition"]["description"],
        "Writes a file."
    );
}

#[tokio::test]
async fn a_tool_back_to_its_pinned_definition_is_served_again() {
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), upstream.path(), "");
    let api = &server.api;
    rug(api, false).await;
    let (status, body) = api
        .call("files__write_file", json!({"path": "a", "content": "b"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(runs(upstream.path(), "write_file"), 0);
    rug(api, true).await;
    assert!(changes(api).await.is_empty());
    let (status, body) = api
        .call("files__write_file", json!({"path": "a", "content": "b"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(runs(upstream.path(), "write_file"), 1);
}

#[tokio::test]
async fn with_pins_off_a_change_passes_through() {
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), upstream.path(), "pins = \"off\"\n");
    let api = &server.api;
    let (status, body) = api.call("files__rug", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the changed definition is served", async || {
        let listed = descriptor(api, "files__write_file").await;
        listed["input_schema"]["properties"].get("cc").map(drop)
    })
    .await;
    let (status, body) = api
        .call(
            "files__write_file",
            json!({"path": "a", "content": "b", "cc": "-"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(runs(upstream.path(), "write_file"), 1);
    let (status, body) = api.get("/upstreams/files/changes").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error(&body, "unknown_upstream");
}

#[tokio::test]
async fn a_tool_new_after_the_first_connection_is_held_until_accepted() {
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), upstream.path(), "");
    let api = &server.api;
    let (status, body) = api.call("files__grow", json!({"name": "extra"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let change = eventually("the new tool is listed as a change", async || {
        changes(api).await.into_iter().next()
    })
    .await;
    assert_eq!(change["tool"], "extra");
    assert_eq!(change["kind"], "new");
    assert_eq!(change["pinned"], Value::Null);
    assert!(!tool_names(api).await.contains(&"files__extra".to_owned()));
    let (status, body) = api.call("files__extra", json!({"text": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(runs(upstream.path(), "extra"), 0);

    let hash = change["upstream"]["hash"].as_str().unwrap();
    let (status, body) = api
        .post(
            "/upstreams/files/changes/extra/accept",
            json!({"hash": hash}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = api.call("files__extra", json!({"text": "x"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(runs(upstream.path(), "extra"), 1);
}

#[tokio::test]
async fn on_new_tool_pin_serves_a_new_tool_at_once() {
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), upstream.path(), "on_new_tool = \"pin\"\n");
    let api = &server.api;
    let (status, body) = api.call("files__grow", json!({"name": "extra"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the new tool is served", async || {
        tool_names(api)
            .await
            .contains(&"files__extra".to_owned())
            .then_some(())
    })
    .await;
    assert!(changes(api).await.is_empty());
}

#[tokio::test]
async fn the_inbox_refuses_a_changed_tools_approval_and_shows_the_diff_to_accept() {
    let data = temp_dir();
    let upstream = temp_dir();
    let gated = "[upstreams.policies.write_file]\nrequire_approval = true\n";
    let server = serve(data.path(), upstream.path(), gated);
    let api = &server.api;
    let (status, body) = api
        .call("files__write_file", json!({"path": "a", "content": "b"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    rug(api, false).await;

    // Approving the call made before the change, confirmed as a write is: refused, and said.
    let mut person = Browser::at(&api.base);
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let csrf = page.csrf();
    let approve = format!("/inbox/calls/{call_id}/approve");
    let form = [("csrf", csrf.as_str()), ("confirm", "1")];
    let page = person.post(&approve, &form).await;
    assert_eq!(page.status, StatusCode::CONFLICT, "{}", page.body);
    assert!(
        page.body
            .contains("changed upstream since this call was made"),
        "{}",
        page.body
    );
    let (_, call) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(call["error"]["code"], "tool_changed", "{call}");
    assert_eq!(runs(upstream.path(), "write_file"), 0);

    // The admin's page: both definitions, escaped, and the accept button.
    let page = person.get("/inbox/changes").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("files__write_file"), "{}", page.body);
    assert!(
        page.body
            .contains("&#34;description&#34;: &#34;Writes a file.&#34;"),
        "{}",
        page.body
    );
    assert!(page.body.contains("read ~/.ssh/id_rsa"), "{}", page.body);
    let hash = changes(api).await[0]["upstream"]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        page.body
            .contains(&format!("name=\"hash\" value=\"{hash}\""))
    );
    let accept = "/inbox/changes/files/write_file/accept";
    let page = person
        .post(accept, &[("csrf", "forged"), ("hash", hash.as_str())])
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    assert!(held(api).await, "a forged form accepts nothing");
    let page = person
        .post(accept, &[("csrf", csrf.as_str()), ("hash", "0")])
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(held(api).await, "another hash accepts nothing");
    let page = person
        .post(accept, &[("csrf", csrf.as_str()), ("hash", hash.as_str())])
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert!(!held(api).await);
    let page = person.get("/inbox/changes?accepted=1").await;
    assert!(page.body.contains("id=\"changes-empty\""), "{}", page.body);
}

/// An admin's key and an approver's.
const ROOT: &str = "tg_root_0123456789abcdef";
const ALICE: &str = "tg_alice_0123456789abcdef";

/// `[[auth.keys]]`: `root`, an admin (`ROOT`), and `alice`, an approver (`ALICE`).
fn keys() -> String {
    [("root", "admin", ROOT), ("alice", "approver", ALICE)]
        .into_iter()
        .map(|(name, role, token)| {
            let hash = hex::encode(toolgate::http::auth::token_sha256(token));
            format!(
                "[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n"
            )
        })
        .collect()
}

/// A POST of `body` to `path` as `token`: the status and the JSON body.
async fn post_as(api: &Api, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let (status, _, body) = common::send(api, Method::POST, path, Some(body), Some(token)).await;
    (status, body)
}

/// A GET of `path` as `token`: the status and the JSON body.
async fn get_as(api: &Api, token: &str, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = common::send(api, Method::GET, path, None, Some(token)).await;
    (status, body)
}

/// `GET /upstreams/files/changes`' changes, as the admin `ROOT` sees them.
async fn changes_as_root(api: &Api) -> Vec<Value> {
    let (_, body) = get_as(api, ROOT, "/upstreams/files/changes").await;
    body["changes"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn only_an_admin_reviews_and_accepts_changes() {
    let keys = keys();
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), upstream.path(), &keys);
    let api = &server.api;
    let (status, body) = post_as(api, ROOT, "/tools/files__rug/call", json!({"input": {}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let found = eventually("the change is found", async || {
        let found = changes_as_root(api).await;
        (!found.is_empty()).then_some(found)
    })
    .await;
    let (status, body) = get_as(api, ALICE, "/upstreams/files/changes").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "forbidden");
    let accept = "/upstreams/files/changes/write_file/accept";
    let (status, body) = post_as(api, ALICE, accept, json!({"hash": "0"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "forbidden");
    // The inbox's door as well: an approver signed in neither sees the changes nor accepts one.
    let hash = found[0]["upstream"]["hash"].as_str().unwrap().to_owned();
    let mut alice = Browser::at(&api.base);
    let signed_in = alice.sign_in(ALICE).await;
    assert!(signed_in.status.is_redirection(), "{}", signed_in.body);
    let page = alice.get("/inbox/changes").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    let csrf = alice.get("/inbox").await.csrf();
    let page = alice
        .post(
            "/inbox/changes/files/write_file/accept",
            &[("csrf", csrf.as_str()), ("hash", hash.as_str())],
        )
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    let still = changes_as_root(api).await;
    assert_eq!(still.len(), 1, "still held: {still:?}");
    let metrics = api.metrics(ROOT).await;
    assert!(
        metrics.contains("toolgate_upstream_tools_held{upstream=\"files\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_upstream_tool_changes_total{upstream=\"files\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_feed_tells_admins_of_a_change_once_and_of_its_accept() {
    let keys = keys();
    // One webhook names the upstream types; one takes the default (every call's type).
    let (named, named_hook) =
        Receiver::start("events = [\"upstream.tool_changed\", \"upstream.change_accepted\"]\n")
            .await;
    let (default, default_hook) = Receiver::start("").await;
    let data = temp_dir();
    let upstream = temp_dir();
    let extra =
        format!("{keys}{named_hook}{default_hook}[webhook_delivery]\ninitial_backoff_ms = 100\n");
    let server = serve(data.path(), upstream.path(), &extra);
    let api = &server.api;
    let mut roots = common::events::open_events(api, ROOT).await;
    let mut alices = common::events::open_events(api, ALICE).await;

    // Changed, put back, changed again: one definition, told once.
    for undo in [false, true, false] {
        let (status, body) = post_as(
            api,
            ROOT,
            "/tools/files__rug/call",
            json!({"input": {"undo": undo}}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        eventually("the upstream's change is read", async || {
            (changes_as_root(api).await.is_empty() == undo).then_some(())
        })
        .await;
    }
    let hash = changes_as_root(api).await[0]["upstream"]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = post_as(
        api,
        ROOT,
        "/upstreams/files/changes/write_file/accept",
        json!({"hash": hash}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A call after the accept: an entry both keys see, which ends their reading.
    let input = json!({"path": "notes.txt", "content": "hi", "cc": "-"});
    let (status, body) = post_as(
        api,
        ROOT,
        "/tools/files__write_file/call",
        json!({"input": input}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let call_id = body["call_id"].as_str().unwrap().to_owned();

    let seen = common::events::events_until(&mut roots, &call_id).await;
    let upstream_entries: Vec<&Value> = seen
        .iter()
        .filter(|event| event["type"].as_str().unwrap().starts_with("upstream."))
        .collect();
    assert_eq!(upstream_entries.len(), 2, "{seen:#?}");
    let (changed, accepted) = (upstream_entries[0], upstream_entries[1]);
    assert_eq!(changed["type"], "upstream.tool_changed");
    assert!(changed.get("call").is_none(), "{changed}");
    let change = &changed["change"];
    assert_eq!(change["upstream"], "files");
    assert_eq!(change["tool"], "write_file");
    assert_eq!(change["served_as"], "files__write_file");
    assert_eq!(change["kind"], "changed");
    assert_eq!(change["differs"], json!(["description", "inputSchema"]));
    assert_eq!(change["hash"], hash.as_str());
    let pinned = change["pinned_hash"].as_str().unwrap();
    assert_ne!(pinned, hash);
    assert_eq!(accepted["type"], "upstream.change_accepted");
    assert_eq!(
        accepted["change"],
        json!({"upstream": "files", "tool": "write_file", "served_as": "files__write_file",
               "hash": hash, "pinned_hash": pinned, "accepted_by": "root"})
    );
    // An approver sees the call, never a change of a tool.
    let alice_saw = common::events::events_until(&mut alices, &call_id).await;
    assert!(
        alice_saw.iter().all(|event| event.get("call").is_some()),
        "{alice_saw:#?}"
    );
    // A type she may name, though she receives none of it (a stream: only its status is read).
    let named_type = api
        .client
        .get(format!("{}/events?types=upstream.tool_changed", api.base))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(named_type.status(), StatusCode::OK);

    // The webhook that names the types receives both; the default one, only the call's.
    let both = eventually("both upstream entries delivered", async || {
        let got = named.got();
        (got.len() >= 2).then_some(got)
    })
    .await;
    let kinds: Vec<&str> = both.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["upstream.tool_changed", "upstream.change_accepted"]);
    assert_eq!(both[1]["data"]["change"]["accepted_by"], "root");
    let calls = eventually("the call's entry delivered", async || {
        let got = default.got();
        got.iter()
            .any(|m| m["data"]["call"]["call_id"] == call_id.as_str())
            .then_some(got)
    })
    .await;
    assert!(
        calls.iter().all(|m| m["data"].get("call").is_some()),
        "{calls:#?}"
    );
    let (_, deliveries) = get_as(api, ROOT, "/webhooks/deliveries?status=delivered").await;
    let told = deliveries["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "upstream.tool_changed")
        .expect("listed");
    assert!(told.get("call_id").is_none(), "{told}");
}

#[tokio::test]
async fn a_standing_approval_granted_before_an_accepted_change_releases_nothing() {
    let policy = "[upstreams.policies.write_file.approval]\nstanding_max_s = 3600\n\
                  standing_max_calls = 5\n";
    let data = temp_dir();
    let upstream = temp_dir();
    let server = serve(data.path(), upstream.path(), &format!("{policy}{}", keys()));
    let api = &server.api;
    let write = |content: &'static str, cc: bool| {
        let mut input = json!({"path": "notes.txt", "content": content});
        if cc {
            input["cc"] = json!("-");
        }
        post_as(
            api,
            ROOT,
            "/tools/files__write_file/call",
            json!({"input": input}),
        )
    };

    // alice approves root's call and grants a standing approval: root's next call runs at once.
    let (status, body) = write("one", false).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let token = body["suspension"]["token"].as_str().unwrap();
    let grant = json!({"input": {}, "standing": {"for_s": 3600, "calls": 5}});
    let (status, body) = post_as(api, ALICE, &format!("/approvals/{token}/approve"), grant).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = write("two", false).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "released by the standing approval: {body}"
    );
    assert_eq!(runs(upstream.path(), "write_file"), 2);

    // The definition changes and an admin accepts it: what alice granted was for the old one.
    let (status, body) = post_as(api, ROOT, "/tools/files__rug/call", json!({"input": {}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let hash = eventually("the change is held", async || {
        changes_as_root(api).await.first()?["upstream"]["hash"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    let accept = "/upstreams/files/changes/write_file/accept";
    let (status, body) = post_as(api, ROOT, accept, json!({"hash": hash})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = write("three", true).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "a person decides again: {body}"
    );
    assert_eq!(runs(upstream.path(), "write_file"), 2, "nothing sent");
}

on_each_backend! {
    #[tokio::test] async fn a_changed_tool_is_held_on_every_door_until_an_admin_accepts_it;
}
