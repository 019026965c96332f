//! MCP's authorization flow end to end (issue 20 §3): a real MCP client, the official Python SDK
//! (`mcp` 2.3, in `.ci/venv`) with its `OAuthClientProvider`, given nothing but toolgate's `/mcp`
//! URL, gets a `401` from it, follows the challenge's `resource_metadata` to toolgate's Protected
//! Resource Metadata (RFC 9728), finds the authorization server there (the test identity
//! provider, `tests/oidc/provider.mjs`), reads its metadata (RFC 8414), registers dynamically
//! (RFC 7591), runs authorization code with PKCE (S256) and `resource` (RFC 8707) while a scripted
//! browser signs in as dana, and calls `echo` over Streamable HTTP with the JWT it got, whose
//! `aud` is toolgate's `/mcp` URL. Toolgate answers the tool's output and records the call as
//! `<issuer name>:dana`.
//!
//! The client is `tests/oauth_host/client.py`; it reports every HTTP exchange the SDK made, which
//! this test holds to the order the flow must take.

mod common;

use std::process::Command;

use common::oidc::Provider;
use common::{Backend, Location, TestServer, api_keys, ci_python, example_tools, repo_root};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use toolgate::http::auth::Role;
use toolgate::identity::{IssuerConfig, Issuers};

const ADMIN: &str = "oauth-host-admin-token-4d1f";

/// Runs the client script to its end (off the runtime that serves it); its last line of output
/// is what it saw, as JSON. The script bounds itself (45 s at most, 10 s per request).
async fn run_client(mcp_url: &str, username: &str) -> Value {
    let mut command = Command::new(ci_python());
    command
        .arg(repo_root().join("tests/oauth_host/client.py"))
        .args([mcp_url, username]);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("the Python client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python SDK's OAuth flow failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the client printed no JSON ({e}): {stdout}"))
}

/// The index of the first exchange after `after` that is `method` on `url`, answered `status`.
#[track_caller]
fn exchange(exchanges: &[Value], after: usize, method: &str, url: &str, status: u16) -> usize {
    exchanges
        .iter()
        .enumerate()
        .skip(after)
        .find(|(_, e)| e["method"] == method && e["url"] == url && e["status"] == status)
        .map(|(i, _)| i)
        .unwrap_or_else(|| {
            panic!(
                "no {method} {url} answered {status} after exchange {after}: {:#}",
                Value::from(exchanges)
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_signs_in_from_the_401_alone_and_calls_a_tool() {
    let provider = Provider::start(json!({}));
    let location = Location::new(Backend::Sqlite).await;
    // The resource's URL names the port, so the port comes first.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mcp_url = format!("{base}/mcp");
    let issuer: IssuerConfig = toml::from_str(&format!(
        "name = \"corp\"\nissuer = \"{}\"\naudiences = [\"{mcp_url}\"]\n\
         [[grants]]\nwhen = {{ scope = \"tools:call\" }}\nrole = \"caller\"\n",
        provider.issuer
    ))
    .unwrap();
    let issuers = Issuers::new(&[issuer])
        .unwrap()
        .for_resource(&mcp_url, &[])
        .unwrap();
    let admin = api_keys(&[("root", Role::Admin, ADMIN)]);
    let server = TestServer::start_on(listener, example_tools(&location), &location, |builder| {
        builder.api_keys(admin).issuers(issuers)
    })
    .await;
    let api = &server.api;

    // What a client without a token is told: where the metadata is, and what to ask for.
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let challenge = format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"tools:call\"");
    let (status, header, _) = common::send(
        api,
        Method::POST,
        "/mcp",
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(header.as_deref(), Some(challenge.as_str()));

    let seen = run_client(&mcp_url, "dana").await;

    // The SDK's exchanges, in the flow's order: the refusal, the resource's metadata, the
    // authorization server's, the registration, the token, and the call with the token.
    let exchanges = seen["exchanges"].as_array().unwrap();
    let issuer = provider.issuer.as_str();
    let first = &exchanges[0];
    assert_eq!(first["method"], "POST", "{first}");
    assert_eq!(first["url"], mcp_url, "{first}");
    assert_eq!(first["status"], 401, "{first}");
    assert_eq!(first["bearer"], false, "{first}");
    assert_eq!(first["www_authenticate"], challenge, "{first}");
    let prm = exchange(exchanges, 1, "GET", &metadata_url, 200);
    let asm = exchange(
        exchanges,
        prm,
        "GET",
        &format!("{issuer}/.well-known/oauth-authorization-server"),
        200,
    );
    let registration = exchange(exchanges, asm, "POST", &format!("{issuer}/reg"), 201);
    let token = exchange(
        exchanges,
        registration,
        "POST",
        &format!("{issuer}/token"),
        200,
    );
    let retried = exchange(exchanges, token, "POST", &mcp_url, 200);
    assert_eq!(exchanges[retried]["bearer"], true, "{}", exchanges[retried]);
    // Once it has a token, the SDK talks only to toolgate, with the token, and is never refused.
    for later in &exchanges[retried..] {
        assert!(
            later["url"] == mcp_url
                && later["bearer"] == true
                && later["status"].as_u64().is_some_and(|status| status < 400),
            "after the token: {later}"
        );
    }

    // The registration: a confidential client with a secret, as the provider assigns when the
    // SDK asks for no method.
    let client = &seen["client"];
    assert_eq!(client["has_secret"], true, "{client}");
    assert_eq!(
        client["token_endpoint_auth_method"], "client_secret_basic",
        "{client}"
    );

    // The authorization request: code, PKCE S256, for toolgate's /mcp, with the challenge's scope.
    let authorization = &seen["authorization"];
    assert_eq!(authorization["response_type"], "code", "{authorization}");
    assert_eq!(
        authorization["client_id"], client["client_id"],
        "{authorization}"
    );
    assert_eq!(
        authorization["code_challenge_method"], "S256",
        "{authorization}"
    );
    assert_eq!(
        authorization["code_challenge"].as_str().map(str::len),
        Some(43),
        "a SHA-256 in base64url: {authorization}"
    );
    assert_eq!(authorization["resource"], mcp_url, "{authorization}");
    let asked: Vec<&str> = authorization["scope"]
        .as_str()
        .unwrap()
        .split(' ')
        .collect();
    assert!(asked.contains(&"tools:call"), "{authorization}");
    // The browser signed in on the provider's form and landed on the redirect URI with a code.
    let signed_in = seen["browser"].as_array().unwrap().iter().any(|step| {
        step["method"] == "POST"
            && step["url"]
                .as_str()
                .is_some_and(|url| url.starts_with(&format!("{issuer}/interaction/")))
    });
    assert!(
        signed_in,
        "the sign-in form was posted: {}",
        seen["browser"]
    );
    assert_eq!(
        seen["landed"],
        json!({"code": true, "state": true, "iss": true, "error": false})
    );

    // The access token: a JWT of the provider, for toolgate's /mcp, of dana, with the scope.
    let claims = &seen["token"]["claims"];
    assert_eq!(claims["iss"], issuer, "{claims}");
    assert_eq!(claims["aud"], mcp_url, "{claims}");
    assert_eq!(claims["sub"], "dana", "{claims}");
    assert_eq!(claims["groups"], json!(["finance"]), "{claims}");
    let scopes: Vec<&str> = claims["scope"].as_str().unwrap().split(' ').collect();
    assert!(scopes.contains(&"tools:call"), "{claims}");

    // The tool's answer, over MCP.
    let answer = &seen["answer"];
    assert_eq!(
        answer["structuredContent"],
        json!({"text": "hello through OAuth"}),
        "{answer}"
    );
    let text: Value = serde_json::from_str(answer["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, json!({"text": "hello through OAuth"}), "{answer}");

    // Toolgate recorded the call as dana's, through the issuer.
    let call_id = answer["_meta"]["dev.toolgate/callId"]
        .as_str()
        .unwrap_or_else(|| panic!("the answer names its call: {answer}"));
    let (status, _, record) = common::send(
        api,
        Method::GET,
        &format!("/calls/{call_id}"),
        None,
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["caller"], "corp:dana", "{record}");
    assert_eq!(record["tool"], "echo", "{record}");
    assert_eq!(record["status"], "completed", "{record}");

    // One registration and one token exchange at the provider: the SDK registered itself.
    let counts = provider.counts().await;
    assert_eq!(counts["paths"]["/reg"], 1, "{counts}");
    assert_eq!(counts["paths"]["/token"], 1, "{counts}");

    server.stop().await;
}
