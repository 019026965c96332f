//! Signed attestations: every call toolgate sends an upstream MCP server (a real one, written
//! with the official Python SDK: `tests/attest/upstream.py`) carries a JWS that the upstream
//! verifies with PyJWT (`tests/attest/verify.py`, the verifier of docs/attestations.md) against
//! `GET /.well-known/jwks.json`, across a key rotation of stored keys (on both backends) and
//! with the ES256 key of a `[signing] key_file` (its id its RFC 7638 thumbprint); its claims
//! name the call, its caller and its approvers; a forged or missing one is refused.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use common::attest::verify;
use common::upstream::free_port;
use common::{Backend, Binary, Location, Site, ci_python, repo_root, temp_dir};

const ROOT: &str = "tg_root_0123456789abcdef";
const ALICE: &str = "tg_alice_0123456789abcdef";

fn keys() -> String {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    [("root", "admin", ROOT), ("alice", "approver", ALICE)]
        .into_iter()
        .map(|(name, role, token)| {
            format!(
                "[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{}\"\n",
                hash(token)
            )
        })
        .collect()
}

fn serve(at: &(impl Site + ?Sized), config: &str, env: &[(&str, &str)]) -> Binary {
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    Binary::start_with(at, &["--config", path.to_str().unwrap()], env)
}

/// The stdio upstream `notes`, recording in `log`; its `note` tool needs an approval.
fn stdio_upstream(log: &Path) -> String {
    format!(
        "[[upstreams]]\nname = \"notes\"\ncommand = [{python:?}, {script:?}, \"--transport\", \
         \"stdio\", \"--log\", {log:?}]\n[upstreams.policies.note]\nrequire_approval = true\n",
        python = ci_python().to_str().unwrap(),
        script = repo_root()
            .join("tests/attest/upstream.py")
            .to_str()
            .unwrap(),
        log = log.to_str().unwrap(),
    )
}

/// What the upstream recorded, one entry per call it got.
fn recorded(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

async fn call_as(api: &common::Api, token: &str, tool: &str, input: Value) -> (StatusCode, Value) {
    let response = api
        .client
        .post(format!("{}/tools/{tool}/call", api.base))
        .bearer_auth(token)
        .json(&json!({ "input": input }))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

async fn approve_as(api: &common::Api, token: &str, approval: &str) -> (StatusCode, Value) {
    let response = api
        .client
        .post(format!("{}/approvals/{approval}/approve", api.base))
        .bearer_auth(token)
        .json(&json!({ "input": {} }))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

/// Stored keys, one per period however many replicas sign: on both backends.
async fn an_upstream_verifies_each_attestation_across_a_rotation_and_it_names_the_approver(
    backend: Backend,
) {
    let data = Location::new(backend).await;
    let upstream = temp_dir();
    let log = upstream.path().join("calls.log");
    // A new key every 2 seconds: the second call is signed by another key than the first.
    let config = format!(
        "{}{}[signing]\nrotate_after_s = 2\nttl_s = 60\n",
        keys(),
        stdio_upstream(&log)
    );
    let server = serve(&data, &config, &[]);
    let api = &server.api;

    let mut calls = Vec::new();
    for note in ["first", "second"] {
        let (status, body) = call_as(api, ROOT, "notes__note", json!({"note": note})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let token = body["suspension"]["token"].as_str().unwrap().to_owned();
        let (status, body) = approve_as(api, ALICE, &token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "completed", "{body}");
        calls.push(body["call_id"].as_str().unwrap().to_owned());
        if note == "first" {
            tokio::time::sleep(Duration::from_millis(2_100)).await;
        }
    }

    let seen = recorded(&log);
    assert_eq!(seen.len(), 2, "{seen:?}");
    let mut kids = Vec::new();
    for (entry, call_id) in seen.iter().zip(&calls) {
        let token = entry["meta"]
            .as_str()
            .expect("the _meta carries the attestation");
        assert!(entry["header"].is_null(), "no HTTP header over stdio");
        let claims = verify(&api.base, "notes", token, Some(&entry["arguments"]))
            .expect("PyJWT verifies it against the published key set");
        assert_eq!(claims["call_id"], call_id.as_str());
        assert_eq!(claims["tool"], "notes__note");
        assert_eq!(claims["aud"], "notes");
        assert_eq!(claims["sub"], "root");
        assert_eq!(claims["caller"], "root");
        assert_eq!(claims["approval"], "approved");
        assert_eq!(claims["approvals"][0]["by"], "alice", "{claims}");
        assert!(claims["approvals"][0]["at"].as_i64().unwrap() <= claims["iat"].as_i64().unwrap());
        assert_eq!(
            claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
            60
        );
        // The key that signed it is named in its header.
        let header: Value = {
            use base64::Engine as _;
            let part = token.split('.').next().unwrap();
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        };
        assert_eq!(header["alg"], "EdDSA");
        kids.push(header["kid"].as_str().unwrap().to_owned());
    }
    assert_ne!(kids[0], kids[1], "the key rotated between the calls");
    // Both keys are published: the first one's tokens have not expired yet.
    let (status, set) = api.get("/.well-known/jwks.json").await;
    assert_eq!(status, StatusCode::OK);
    let published: Vec<&str> = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["kid"].as_str().unwrap())
        .collect();
    for kid in &kids {
        assert!(published.contains(&kid.as_str()), "{kid} in {published:?}");
    }

    // For another audience, with other arguments, altered, or missing: refused.
    let first = seen[0]["meta"].as_str().unwrap();
    let refused = verify(&api.base, "other", first, None).unwrap_err();
    assert!(refused.contains("Audience doesn't match"), "{refused}");
    let refused = verify(&api.base, "notes", first, Some(&json!({"note": "forged"}))).unwrap_err();
    assert!(refused.contains("not those attested"), "{refused}");
    let mut parts: Vec<String> = first.split('.').map(str::to_owned).collect();
    parts[1] = {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut claims: Value = serde_json::from_slice(&engine.decode(&parts[1]).unwrap()).unwrap();
        claims["sub"] = json!("mallory");
        engine.encode(claims.to_string())
    };
    let refused = verify(&api.base, "notes", &parts.join("."), None).unwrap_err();
    assert!(
        refused.contains("Signature verification failed"),
        "{refused}"
    );
    let refused = verify(&api.base, "notes", "", None).unwrap_err();
    assert!(refused.contains("no attestation"), "{refused}");
}

#[tokio::test]
async fn an_http_upstream_gets_the_attestation_in_its_header_too_and_the_key_set_is_public() {
    let data = temp_dir();
    let upstream = temp_dir();
    let log = upstream.path().join("calls.log");
    let port = free_port();
    let mut child = Command::new(ci_python())
        .arg(repo_root().join("tests/attest/upstream.py"))
        .args(["--transport", "http", "--port", &port.to_string(), "--log"])
        .arg(&log)
        .spawn()
        .unwrap();
    common::eventually("the upstream listens", async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(drop)
    })
    .await;
    // The key of a file: a P-256 key, so ES256.
    let pem_path = data.path().join("signing.pem");
    std::fs::write(&pem_path, p256_pem()).unwrap();
    let config = format!(
        "[[upstreams]]\nname = \"web\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
         [signing]\nkey_file = {:?}\n",
        pem_path.to_str().unwrap()
    );
    let server = serve(data.path(), &config, &[]);
    let api = &server.api;

    let (status, body) = api.call("web__note", json!({"note": "hello"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = recorded(&log);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let token = seen[0]["meta"].as_str().unwrap();
    assert_eq!(
        seen[0]["header"].as_str(),
        Some(token),
        "the header carries the same token"
    );
    let claims = verify(&api.base, "web", token, Some(&json!({"note": "hello"}))).unwrap();
    assert_eq!(claims["approval"], "not_required");
    assert_eq!(claims["policy"], "none");
    assert_eq!(claims["approvals"], json!([]));
    assert_eq!(claims["caller"], Value::Null, "auth is off");

    // The key set: public, cacheable, the public halves only.
    let response = api
        .client
        .get(format!("{}/.well-known/jwks.json", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cache = response.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cache.starts_with("public, max-age="), "{cache}");
    let set: Value = response.json().await.unwrap();
    assert_eq!(
        set["keys"].as_array().unwrap().len(),
        1,
        "the file's key alone: {set}"
    );
    let key = &set["keys"][0];
    assert_eq!(key["kty"], "EC");
    assert_eq!(key["crv"], "P-256");
    assert_eq!(key["alg"], "ES256");
    assert!(key.get("d").is_none(), "never the private half: {key}");
    // Its id is its RFC 7638 thumbprint: the SHA-256 of its required members, in order.
    let thumbprint = {
        use base64::Engine as _;
        use sha2::Digest as _;
        let members = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            key["x"].as_str().unwrap(),
            key["y"].as_str().unwrap()
        );
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(members))
    };
    assert_eq!(key["kid"], thumbprint.as_str());
    let header: Value = {
        use base64::Engine as _;
        let part = token.split('.').next().unwrap();
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        serde_json::from_slice(&engine.decode(part).unwrap()).unwrap()
    };
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["kid"], thumbprint.as_str());
    let _ = child.kill();
    let _ = child.wait();
}

/// A new P-256 key as a PKCS#8 PEM, as `openssl genpkey -algorithm EC` writes one.
fn p256_pem() -> String {
    use base64::Engine as _;
    let rng = ring::rand::SystemRandom::new();
    let der = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &rng,
    )
    .unwrap();
    let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        lines.join("\n")
    )
}

on_each_backend! {
    #[tokio::test] async fn an_upstream_verifies_each_attestation_across_a_rotation_and_it_names_the_approver;
}
