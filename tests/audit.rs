//! The audit record, as an auditor meets it: the real binary on both backends, its chain read at
//! `GET /audit` and checked by `toolgate audit verify` against `/.well-known/jwks.json`; the
//! database edited behind the server's back (one field changed, a row deleted, two swapped, a
//! checkpoint forged) and each edit named by the verifier; a receipt checked offline by the
//! command and by Python (`tests/audit/verify_receipt.py`, the verifier of docs/audit.md);
//! `kill -9` under load, and two replicas under load, leaving one chain that verifies.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use common::{Backend, Binary, Location, Site, ci_python, eventually, repo_root, send, temp_dir};

const ROOT: &str = "tg_root_0123456789abcdef";
const ALICE: &str = "tg_alice_0123456789abcdef";
const BOB: &str = "tg_bob_0123456789abcdefgh";

fn config(at: &(impl Site + ?Sized)) -> Vec<String> {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let keys: String = [
        ("root", "admin", ROOT),
        ("alice", "approver", ALICE),
        ("bob", "caller", BOB),
    ]
    .into_iter()
    .map(|(name, role, token)| {
        format!(
            "[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{}\"\n",
            hash(token)
        )
    })
    .collect();
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, keys).unwrap();
    vec!["--config".into(), path.to_str().unwrap().to_owned()]
}

fn serve(at: &(impl Site + ?Sized), checkpoint_s: &str) -> Binary {
    let args = config(at);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Binary::start_with(
        at,
        &args,
        &[("TOOLGATE_AUDIT__CHECKPOINT_INTERVAL_S", checkpoint_s)],
    )
}

async fn call(api: &common::Api, tool: &str, input: Value) -> Value {
    let (status, _, body) = send(
        api,
        Method::POST,
        &format!("/tools/{tool}/call"),
        Some(json!({ "input": input })),
        Some(BOB),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    body
}

/// A suspended `ask_human` call: its id and token.
async fn ask(api: &common::Api, question: &str) -> (String, String) {
    let body = call(api, "ask_human", json!({ "question": question })).await;
    assert_eq!(body["status"], "suspended", "{body}");
    (
        body["call_id"].as_str().unwrap().to_owned(),
        body["suspension"]["token"].as_str().unwrap().to_owned(),
    )
}

async fn decide(api: &common::Api, token: &str, verb: &str, body: Value) {
    let (status, _, answer) = send(
        api,
        Method::POST,
        &format!("/approvals/{token}/{verb}"),
        Some(body),
        Some(ALICE),
    )
    .await;
    assert!(status.is_success(), "{verb}: {status} {answer}");
}

/// `GET /audit`, every page, as the admin: the export's text.
async fn export(api: &common::Api) -> String {
    let response = api
        .client
        .get(format!("{}/audit?limit=10000", api.base))
        .bearer_auth(ROOT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/x-ndjson",
        "JSON lines"
    );
    response.text().await.unwrap()
}

fn entries(export: &str) -> Vec<Value> {
    export
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The export once a checkpoint signs its last entry that is not a checkpoint (two replicas may
/// each sign the same head).
async fn checkpointed(api: &common::Api) -> String {
    eventually("a checkpoint signs the head", async || {
        let text = export(api).await;
        let all = entries(&text);
        let is_checkpoint = |e: &&Value| e["event"]["type"] == "audit.checkpoint";
        let signed = all.iter().rfind(is_checkpoint)?["event"]["head_seq"].as_i64()?;
        let last = all.iter().rfind(|e| !is_checkpoint(e))?["seq"].as_i64()?;
        (signed >= last).then_some(text)
    })
    .await
}

/// `toolgate audit verify FILE --keys JWKS`: its exit code and what it printed.
fn verify(dir: &Path, name: &str, text: &str) -> (i32, String) {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify"])
        .arg(&file)
        .arg("--keys")
        .arg(dir.join("jwks.json"))
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap(), printed)
}

/// The verifier run on a blocking thread: a server in this process answers meanwhile.
async fn verify_aside(dir: &Path, name: &str, text: &str) -> (i32, String) {
    let (dir, name, text) = (dir.to_owned(), name.to_owned(), text.to_owned());
    tokio::task::spawn_blocking(move || verify(&dir, &name, &text))
        .await
        .unwrap()
}

async fn save_keys(api: &common::Api, dir: &Path) {
    let (status, body) = api.get("/.well-known/jwks.json").await;
    assert_eq!(status, StatusCode::OK);
    std::fs::write(dir.join("jwks.json"), body.to_string()).unwrap();
}

/// One statement run on the server's database, behind its back.
async fn tamper(at: &Location, sql: &str) {
    match at.database_url() {
        Some(url) => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client.batch_execute(sql).await.unwrap();
        }
        None => {
            let conn = rusqlite::Connection::open(at.data_dir().join("toolgate.db")).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            conn.execute_batch(sql).unwrap();
        }
    }
}

/// SQL's quoting of a text.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The entry of `seq` as stored: its canonical JSON and hash.
fn stored(entry: &Value) -> (String, String) {
    let mut body = entry.clone();
    let hash = body.as_object_mut().unwrap().remove("hash").unwrap();
    (
        toolgate::store::canonical_json(&body),
        hash.as_str().unwrap().to_owned(),
    )
}

fn set_entry(seq: i64, entry: &str, hash: &str) -> String {
    format!(
        "UPDATE audit SET entry = {}, hash = {} WHERE seq = {seq};",
        quoted(entry),
        quoted(hash)
    )
}

/// A checkpoint's JWS as a forger makes it: the same claims and `kid`, signed with a key of
/// their own.
fn forged_jws(genuine: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = genuine.split('.').collect();
    let header: Value = serde_json::from_slice(&b64.decode(parts[0]).unwrap()).unwrap();
    let claims: Value = serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    let pkcs8 =
        ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let mut forged = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    forged.kid = header["kid"].as_str().map(str::to_owned);
    jsonwebtoken::encode(
        &forged,
        &claims,
        &jsonwebtoken::EncodingKey::from_ed_der(pkcs8.as_ref()),
    )
    .unwrap()
}

async fn every_tampering_with_the_chain_is_named(backend: Backend) {
    let at = Location::new(backend).await;
    let server = serve(&at, "1");
    let api = &server.api;
    let read = call(api, "echo", json!({"text": "one"})).await;
    let (approved, token) = ask(api, "refund 40 EUR?").await;
    decide(
        api,
        &token,
        "approve",
        json!({"input": {"answer": "yes, card 4242"}}),
    )
    .await;
    let (_, token) = ask(api, "delete the repo?").await;
    decide(api, &token, "reject", json!({"reason": "no"})).await;
    call(api, "echo", json!({"text": "two"})).await;
    let dir = temp_dir();
    save_keys(api, dir.path()).await;

    let clean = checkpointed(api).await;
    let chain = entries(&clean);
    let (code, printed) = verify_aside(dir.path(), "clean.jsonl", &clean).await;
    assert_eq!(code, 0, "{printed}");
    assert!(
        printed.starts_with("ok: chain verified: entries 1 to "),
        "{printed}"
    );
    // Who approved and who rejected, by name; the answer only as its hash.
    let by_type = |kind: &str| {
        chain
            .iter()
            .find(|e| e["event"]["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {clean}"))
            .clone()
    };
    let approval = by_type("call.approved");
    assert_eq!(approval["event"]["by"], "alice");
    assert_eq!(approval["event"]["call_id"], approved.as_str());
    assert!(approval["event"]["details"]["answer_sha256"].is_string());
    assert!(
        !clean.contains("card 4242"),
        "the answer itself is not in the chain: {clean}"
    );
    assert_eq!(by_type("call.rejected")["event"]["details"]["reason"], "no");
    assert!(by_type("call.created")["event"]["input_sha256"].is_string());
    // A read is recorded already completed: one entry records its creation and its outcome,
    // the output as the hash of its canonical JSON.
    let read_entries: Vec<&Value> = chain
        .iter()
        .filter(|e| e["event"]["call_id"] == read["call_id"])
        .collect();
    assert_eq!(read_entries.len(), 1, "{clean}");
    let event = &read_entries[0]["event"];
    assert_eq!(event["type"], "call.created", "{event}");
    assert_eq!(event["status"], "completed", "{event}");
    assert_eq!(event["attempts"], 1, "{event}");
    let output = toolgate::store::canonical_json(&read["output"]);
    let digest = ring::digest::digest(&ring::digest::SHA256, output.as_bytes());
    assert_eq!(
        event["output_sha256"],
        hex::encode(digest.as_ref()),
        "{event}"
    );

    // Cut below a checkpoint (retention), the chain verifies from it; cut anywhere else, not.
    let first_checkpoint = chain
        .iter()
        .position(|e| e["event"]["type"] == "audit.checkpoint")
        .unwrap();
    let lines: Vec<&str> = clean.lines().collect();
    let cut = lines[first_checkpoint..].join("\n");
    let (code, printed) = verify_aside(dir.path(), "cut.jsonl", &cut).await;
    assert_eq!(code, 0, "{printed}");
    let from = chain[first_checkpoint]["seq"].clone();
    assert!(
        printed.contains(&format!("entries {from} to ")),
        "{printed}"
    );
    let (code, printed) = verify_aside(dir.path(), "cut-badly.jsonl", &lines[1..].join("\n")).await;
    assert_eq!(code, 1, "{printed}");
    assert!(
        printed.contains("at neither entry 1 nor a checkpoint"),
        "{printed}"
    );

    // One field of one row changed.
    let seq = approval["seq"].as_i64().unwrap();
    let (entry, hash) = stored(&approval);
    let edited = entry.replace("\"by\":\"alice\"", "\"by\":\"mallory\"");
    assert_ne!(edited, entry);
    tamper(&at, &set_entry(seq, &edited, &hash)).await;
    let (code, printed) = verify_aside(dir.path(), "edited.jsonl", &export(api).await).await;
    assert_eq!(code, 1, "{printed}");
    assert!(
        printed.starts_with(&format!("FAILED: entry {seq} "))
            && printed.contains("hash does not match"),
        "{printed}"
    );
    tamper(&at, &set_entry(seq, &entry, &hash)).await;

    // A row deleted (and put back after).
    tamper(&at, &format!("DELETE FROM audit WHERE seq = {seq};")).await;
    let (code, printed) = verify_aside(dir.path(), "deleted.jsonl", &export(api).await).await;
    assert_eq!(code, 1, "{printed}");
    assert!(
        printed.starts_with(&format!("FAILED: entry {seq} ")) && printed.contains("missing"),
        "{printed}"
    );
    tamper(
        &at,
        &format!(
            "INSERT INTO audit (at, call_id, seq, entry, hash) VALUES ({}, {}, {seq}, {}, {});",
            approval["at"],
            quoted(&approved),
            quoted(&entry),
            quoted(&hash)
        ),
    )
    .await;
    let next = &chain[usize::try_from(seq).unwrap()];
    let (next_entry, next_hash) = stored(next);

    // Two rows swapped.
    tamper(
        &at,
        &format!(
            "{} {}",
            set_entry(seq, &next_entry, &next_hash),
            set_entry(seq + 1, &entry, &hash)
        ),
    )
    .await;
    let (code, printed) = verify_aside(dir.path(), "swapped.jsonl", &export(api).await).await;
    assert_eq!(code, 1, "{printed}");
    assert!(
        printed.starts_with(&format!("FAILED: entry {seq} ")),
        "{printed}"
    );
    tamper(
        &at,
        &format!(
            "{} {}",
            set_entry(seq, &entry, &hash),
            set_entry(seq + 1, &next_entry, &next_hash)
        ),
    )
    .await;
    let (code, printed) = verify_aside(dir.path(), "restored.jsonl", &export(api).await).await;
    assert_eq!(code, 0, "restored: {printed}");

    // A checkpoint forged, and every hash after it recomputed, as someone with the database
    // would: its signature is what gives it away.
    let checkpoint = chain
        .iter()
        .rfind(|e| e["event"]["type"] == "audit.checkpoint")
        .unwrap();
    let at_seq = checkpoint["seq"].as_i64().unwrap();
    let mut forged = checkpoint.clone();
    let jws = forged["event"]["jws"].as_str().unwrap().to_owned();
    forged["event"]["jws"] = json!(forged_jws(&jws));
    let mut prev = chain[usize::try_from(at_seq).unwrap() - 2]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut statements = String::new();
    for entry in std::iter::once(&forged).chain(&chain[usize::try_from(at_seq).unwrap()..]) {
        let (text, _) = stored(entry);
        let hash = toolgate::store::link(&prev, &text);
        statements.push_str(&set_entry(entry["seq"].as_i64().unwrap(), &text, &hash));
        prev = hash;
    }
    tamper(&at, &statements).await;
    let (code, printed) = verify_aside(dir.path(), "forged.jsonl", &export(api).await).await;
    assert_eq!(code, 1, "{printed}");
    assert!(
        printed.starts_with(&format!("FAILED: entry {at_seq} "))
            && printed.contains("signature is refused"),
        "{printed}"
    );
}

async fn a_receipt_proves_one_call_offline(backend: Backend) {
    let at = Location::new(backend).await;
    // No checkpoint on a timer within the test: the receipt's own is signed on demand.
    let server = serve(&at, "3600");
    let api = &server.api;
    call(api, "echo", json!({"text": "before"})).await;
    let (call_id, token) = ask(api, "ship it?").await;
    decide(api, &token, "approve", json!({"input": {"answer": "yes"}})).await;
    call(api, "echo", json!({"text": "after"})).await;
    let dir = temp_dir();
    save_keys(api, dir.path()).await;

    let path = format!("/calls/{call_id}/receipt");
    for who in [ALICE, BOB] {
        let (status, _, body) = send(api, Method::GET, &path, None, Some(who)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    let (status, _, body) = send(
        api,
        Method::GET,
        "/calls/call_nope/receipt",
        None,
        Some(ROOT),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    common::assert_error(&body, "unknown_call");
    let (status, _, receipt) = send(api, Method::GET, &path, None, Some(ROOT)).await;
    assert_eq!(status, StatusCode::OK, "{receipt}");
    assert_eq!(receipt["call_id"], call_id.as_str());
    let own: Vec<i64> = receipt["call_entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_i64().unwrap())
        .collect();
    let kinds: Vec<&str> = receipt["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| own.contains(&e["seq"].as_i64().unwrap()))
        .map(|e| e["event"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "call.created",
            "call.suspended",
            "call.approved",
            "call.redispatched",
            "call.completed"
        ],
        "{receipt}"
    );
    assert_eq!(
        receipt["entries"].as_array().unwrap().last().unwrap()["event"]["type"],
        "audit.checkpoint"
    );

    let text = receipt.to_string();
    let (code, printed) = verify_aside(dir.path(), "receipt.json", &text).await;
    assert_eq!(code, 0, "{printed}");
    assert!(printed.starts_with("ok: receipt verified"), "{printed}");
    assert_eq!(
        python(dir.path(), "receipt.json"),
        (
            0,
            format!(
                "ok {call_id} {}",
                receipt["entries"].as_array().unwrap().len()
            )
        )
    );

    // Altered: who approved.
    let altered = text.replace("\"by\":\"alice\"", "\"by\":\"mallory\"");
    assert_ne!(altered, text);
    let (code, printed) = verify_aside(dir.path(), "altered.json", &altered).await;
    assert_eq!(code, 1, "{printed}");
    let approved = receipt["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"]["type"] == "call.approved")
        .unwrap()["seq"]
        .clone();
    assert!(
        printed.starts_with(&format!("FAILED: entry {approved} ")),
        "{printed}"
    );
    let (code, printed) = python(dir.path(), "altered.json");
    assert_eq!(code, 1, "{printed}");
    assert!(printed.starts_with("refused:"), "{printed}");
}

/// `tests/audit/verify_receipt.py` on a receipt saved in `dir`.
fn python(dir: &Path, name: &str) -> (i32, String) {
    let out = Command::new(ci_python())
        .arg(repo_root().join("tests/audit/verify_receipt.py"))
        .arg(dir.join(name))
        .arg(dir.join("jwks.json"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    )
}

/// Keyed `echo` calls in `lanes` loops, `most` each or until the server is gone: the ids of
/// those answered `200`.
async fn load(api: &common::Api, lanes: usize, most: usize, tag: &str) -> Vec<String> {
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let api = api.clone();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            for n in 0.. {
                let key = format!("{tag}-{lane}-{n}");
                let sent = api
                    .client
                    .post(format!("{}/tools/echo/call", api.base))
                    .bearer_auth(BOB)
                    .header("Idempotency-Key", &key)
                    .json(&json!({"input": {"text": key}}))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                let Ok(response) = sent else { break };
                if response.status() != StatusCode::OK {
                    break;
                }
                let Ok(body) = response.json::<Value>().await else {
                    break;
                };
                answered.push(body["call_id"].as_str().unwrap().to_owned());
                if n + 1 >= most {
                    break;
                }
            }
            answered
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

/// The ids of the calls the chain says completed (`call.completed`, or `call.created` already
/// completed).
fn completed(chain: &[Value]) -> std::collections::HashSet<String> {
    chain
        .iter()
        .filter(|e| e["event"]["status"] == "completed")
        .map(|e| e["event"]["call_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn a_kill_9_under_load_leaves_a_chain_that_verifies(backend: Backend) {
    let at = Location::new(backend).await;
    let server = serve(&at, "1");
    let api = server.api.clone();
    let loaded = tokio::spawn(async move { load(&api, 4, usize::MAX, "k").await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill();
    let acknowledged = loaded.await.unwrap();
    assert!(
        acknowledged.len() > 10,
        "{} calls before the kill",
        acknowledged.len()
    );

    let server = serve(&at, "1");
    let dir = temp_dir();
    save_keys(&server.api, dir.path()).await;
    let text = checkpointed(&server.api).await;
    let (code, printed) = verify_aside(dir.path(), "after-kill.jsonl", &text).await;
    assert_eq!(code, 0, "{printed}");
    let chained = completed(&entries(&text));
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !chained.contains(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged, not in the chain: {missing:?}"
    );
}

async fn a_graceful_stop_signs_the_head(backend: Backend) {
    let at = Location::new(backend).await;
    let server = serve(&at, "3600");
    call(&server.api, "echo", json!({"text": "last words"})).await;
    assert!(server.terminate());
    let server = serve(&at, "3600");
    let chain = entries(&export(&server.api).await);
    let last = chain.last().unwrap();
    assert_eq!(last["event"]["type"], "audit.checkpoint", "{last}");
    assert_eq!(last["event"]["head_seq"], chain[chain.len() - 2]["seq"]);
}

on_each_backend! {
    #[tokio::test] async fn every_tampering_with_the_chain_is_named;
    #[tokio::test] async fn a_receipt_proves_one_call_offline;
    #[tokio::test] async fn a_kill_9_under_load_leaves_a_chain_that_verifies;
    #[tokio::test] async fn a_graceful_stop_signs_the_head;
}

#[tokio::test]
async fn two_replicas_under_load_write_one_chain_that_verifies() {
    let at = Location::new(Backend::Postgres).await;
    let (one, two) = (serve(&at, "1"), serve(&at, "1"));
    let (api_one, api_two) = (one.api.clone(), two.api.clone());
    let (a, b) = tokio::join!(load(&api_one, 3, 100, "one"), load(&api_two, 3, 100, "two"));
    let (_, token) = ask(&one.api, "approve on the other replica?").await;
    decide(
        &two.api,
        &token,
        "approve",
        json!({"input": {"answer": "yes"}}),
    )
    .await;
    let dir = temp_dir();
    save_keys(&one.api, dir.path()).await;
    let text = checkpointed(&one.api).await;
    let (code, printed) = verify_aside(dir.path(), "replicas.jsonl", &text).await;
    assert_eq!(code, 0, "{printed}");
    let chain = entries(&text);
    let chained = completed(&chain);
    for id in a.iter().chain(&b) {
        assert!(chained.contains(id), "{id} is not in the chain");
    }
    // One chain: the other replica reads the same entries.
    let other = export(&two.api).await;
    assert!(other.starts_with(&text) || text.starts_with(&other));
}
