//! The caller's identity upstream (`[upstreams.auth] mode = "token_exchange"`): each call to an
//! HTTP upstream carries a token the test identity provider (`tests/oidc/provider.mjs`, with its
//! token exchange grant) issued for that call's caller and the upstream's audience, never the
//! static header nor another caller's token; the upstream (`tests/upstream/server.py`'s `whoami`)
//! records the `Authorization` it got, so a test reads what reached it. A call approved after
//! its caller's token expired runs on the refresh token kept at suspension, or ends
//! `upstream_credentials_expired` with nothing sent; no token is ever logged.

mod common;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use common::oidc::{Provider, RESOURCE};
use common::upstream::{HttpUpstream, free_port};
use common::{Api, Backend, Binary, Location, Site, assert_error, eventually, send, temp_dir};

/// The admin key: it approves, and (having no identity provider's token) cannot act upstream.
const ADMIN: &str = "admin-token-caller-identity";
/// The upstream's audience, as the exchange asks for it.
const AUDIENCE: &str = "https://web.test/mcp";
/// The static header every other request to the upstream carries.
const STATIC: &str = "Bearer static-service-account";
/// toolgate's client at the provider, and its secret's variable.
const CLIENT: &str = "toolgate-exchange";
const SECRET_ENV: &str = "EXCHANGE_SECRET";

/// toolgate's configuration: the admin key, the provider as issuer `corp` (no leeway: an expired
/// token is expired), and the upstream `web` at `url` acting as each caller, with `extra`.
fn config(provider: &Provider, url: &str, extra: &str) -> String {
    let admin = hex::encode(toolgate::http::auth::token_sha256(ADMIN));
    format!(
        r#"log_format = "json"

[auth]
resource_url = "{RESOURCE}"

[[auth.keys]]
name = "ops"
role = "admin"
token_sha256 = "{admin}"

[[auth.issuers]]
name = "corp"
issuer = "{issuer}"
audiences = ["{RESOURCE}"]
leeway_s = 0

[[auth.issuers.grants]]
when = {{ scope = "tools:call" }}
role = "caller"

[[upstreams]]
name = "web"
url = "{url}"
headers = {{ Authorization = "{STATIC}" }}

[upstreams.auth]
mode = "token_exchange"
issuer = "corp"
audience = "{AUDIENCE}"
client_id = "{CLIENT}"
client_secret_env = "{SECRET_ENV}"
{extra}
"#,
        issuer = provider.issuer,
    )
}

/// The binary on the store at `at` with `config`, logging at debug level.
fn serve(at: &(impl Site + ?Sized), config: &str) -> Binary {
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    let secret = format!("{CLIENT}-secret");
    Binary::start_with(
        at,
        &["--config", path.to_str().unwrap()],
        &[(SECRET_ENV, secret.as_str()), ("RUST_LOG", "debug")],
    )
}

/// A provider with `provider` over its defaults, the upstream recording in its own directory,
/// and toolgate on the store at `at` acting as each caller there, with `extra` in its config.
struct Setup {
    provider: Provider,
    upstream_dir: tempfile::TempDir,
    _upstream: HttpUpstream,
    server: Binary,
}

impl Setup {
    async fn start(provider: Value, at: &(impl Site + ?Sized), extra: &str) -> Setup {
        let provider = Provider::start(provider);
        let upstream_dir = temp_dir();
        let upstream = HttpUpstream::start(upstream_dir.path(), free_port()).await;
        let server = serve(at, &config(&provider, &upstream.url(), extra));
        served(&server.api).await;
        Setup {
            provider,
            upstream_dir,
            _upstream: upstream,
            server,
        }
    }

    /// The `Authorization` of each run of `whoami`, in order.
    fn authorizations(&self) -> Vec<String> {
        authorizations(self.upstream_dir.path())
    }
}

/// Waits until `web__whoami` is served.
async fn served(api: &Api) {
    eventually("the upstream's tools are served", async || {
        let (_, _, body) = send(api, Method::GET, "/tools", None, Some(ADMIN)).await;
        let tools = body["tools"].as_array()?;
        tools
            .iter()
            .any(|tool| tool["name"] == "web__whoami")
            .then_some(())
    })
    .await;
}

/// Calls `web__whoami` as `token`.
async fn whoami(api: &Api, token: &str) -> (StatusCode, Value) {
    let (status, _, body) = send(
        api,
        Method::POST,
        "/tools/web__whoami/call",
        Some(json!({"input": {}})),
        Some(token),
    )
    .await;
    (status, body)
}

/// The `Authorization` of each run of `whoami`, in order.
fn authorizations(dir: &Path) -> Vec<String> {
    match std::fs::read_to_string(dir.join("authorization.log")) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => panic!("cannot read authorization.log: {err}"),
    }
}

/// The claims of the bearer JWT in `authorization` (`Bearer <jwt>`), unverified.
fn claims(authorization: &str) -> Value {
    let token = authorization
        .strip_prefix("Bearer ")
        .unwrap_or_else(|| panic!("a bearer: {authorization}"));
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// How many exchanges the provider granted and refresh tokens it redeemed.
async fn exchanges(provider: &Provider) -> (u64, u64) {
    let body: Value = reqwest::get(format!("{}/_test/exchanges", provider.issuer))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        body["exchanged"].as_u64().unwrap(),
        body["refreshed"].as_u64().unwrap(),
    )
}

/// Asserts no line of `log` holds any of `secrets`.
fn never_logged(log: &[String], secrets: &[&str]) {
    assert!(log.len() > 10, "the server logged: {log:#?}");
    for secret in secrets {
        let tail = &secret[secret.len().saturating_sub(24)..];
        if let Some(line) = log.iter().find(|line| line.contains(tail)) {
            panic!("a secret was logged: {line}");
        }
    }
}

#[tokio::test]
async fn two_callers_reach_the_upstream_each_with_a_token_exchanged_for_it() {
    let data = temp_dir();
    let setup = Setup::start(json!({}), data.path(), "").await;
    let (provider, api) = (&setup.provider, &setup.server.api);

    let rs = provider.machine_token("machine-rs256", "tools:call").await;
    let es = provider.machine_token("machine-es256", "tools:call").await;
    for token in [&rs, &es, &rs] {
        let (status, body) = whoami(api, token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["output"], json!({"authorized": true}));
    }

    // Each call carried its own caller's exchanged token, for the upstream's audience: never
    // the static header, never the caller's own token.
    let seen = setup.authorizations();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let subjects: Vec<Value> = seen.iter().map(|a| claims(a)["sub"].clone()).collect();
    assert_eq!(
        subjects,
        [
            json!("machine-rs256"),
            json!("machine-es256"),
            json!("machine-rs256")
        ]
    );
    for authorization in &seen {
        let claims = claims(authorization);
        assert_eq!(claims["aud"], AUDIENCE, "{claims}");
        assert_eq!(claims["iss"], provider.issuer.as_str(), "{claims}");
        assert_eq!(claims["act"]["sub"], CLIENT, "{claims}");
        assert_ne!(authorization, STATIC);
        assert!(!authorization.contains(&rs) && !authorization.contains(&es));
    }
    assert_ne!(seen[0], seen[1], "two callers, two tokens");
    // The first caller's token was cached for its second call: two exchanges for three calls.
    assert_eq!(seen[0], seen[2]);
    assert_eq!(exchanges(provider).await, (2, 0));

    // A key has no token to exchange: refused, naming why, and nothing reaches the upstream.
    let (status, body) = whoami(api, ADMIN).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "upstream_credentials_missing");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no identity provider's token"),
        "{body}"
    );
    assert_eq!(setup.authorizations().len(), 3);

    let mut secrets: Vec<&str> = vec![&rs, &es, "toolgate-exchange-secret"];
    secrets.extend(seen.iter().map(|a| &a["Bearer ".len()..]));
    never_logged(&setup.server.log(), &secrets);
}

#[tokio::test]
async fn a_refused_exchange_ends_the_call_naming_why_and_sends_nothing() {
    let data = temp_dir();
    let refusing = json!({ "exchange_refused_audiences": [AUDIENCE] });
    let setup = Setup::start(refusing, data.path(), "").await;
    let (provider, api) = (&setup.provider, &setup.server.api);

    let token = provider.machine_token("machine-es256", "tools:call").await;
    let (status, body) = whoami(api, &token).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "upstream_exchange_refused");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("invalid_target"), "{message}");
    assert!(message.contains(AUDIENCE), "{message}");
    assert!(setup.authorizations().is_empty());
    assert_eq!(body["error"]["details"]["status"], "failed", "{body}");
}

/// The provider for the approval tests: `machine-rs256`'s tokens last 3 s, the exchanged ones
/// 2 s (already too short to be used from the cache), with or without a refresh token.
fn short_lived(refresh: bool) -> Value {
    json!({
        "exchange_token_ttl": 2,
        "exchange_refresh": refresh,
        "clients": [{"client_id": "machine-rs256", "access_token_ttl": 3}],
    })
}

/// Calls the gated `web__whoami` as a caller whose token then expires, and approves it as the
/// admin after that: the approval's status and body.
async fn approved_after_expiry(api: &Api, provider: &Provider) -> (StatusCode, Value) {
    let token = provider.machine_token("machine-rs256", "tools:call").await;
    let (status, body) = whoami(api, &token).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let suspension = body["suspension"]["token"].as_str().unwrap().to_owned();
    // The caller's token, and the one exchanged for it at the suspension, expire.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, _, _) = send(api, Method::GET, "/tools", None, Some(&token)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the caller's token has expired"
    );
    let (status, _, body) = send(
        api,
        Method::POST,
        &format!("/approvals/{suspension}/approve"),
        Some(json!({"input": {}})),
        Some(ADMIN),
    )
    .await;
    (status, body)
}

const GATED: &str = "[upstreams.policies.whoami]\nrequire_approval = true\n";

async fn an_approval_after_the_callers_token_expired_runs_on_the_refresh_token(backend: Backend) {
    let data = Location::new(backend).await;
    let setup = Setup::start(short_lived(true), &data, GATED).await;
    let (provider, api) = (&setup.provider, &setup.server.api);

    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (status, body) = approved_after_expiry(api, provider).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"authorized": true}), "{body}");
    // Exchanged at the suspension, refreshed at the approval: the upstream got a token of the
    // caller, for its audience, issued after the caller's own token expired.
    assert_eq!(exchanges(provider).await, (1, 1));
    let seen = setup.authorizations();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let claims = claims(&seen[0]);
    assert_eq!(claims["sub"], "machine-rs256", "{claims}");
    assert_eq!(claims["aud"], AUDIENCE, "{claims}");
    assert!(claims["iat"].as_u64().unwrap() >= started + 3, "{claims}");
    // The refreshed token, sent at the approval, is in no log line either.
    never_logged(&setup.server.log(), &[&seen[0]["Bearer ".len()..]]);
}

async fn an_approval_after_the_callers_token_expired_without_a_refresh_token_sends_nothing(
    backend: Backend,
) {
    let data = Location::new(backend).await;
    let setup = Setup::start(short_lived(false), &data, GATED).await;
    let (provider, api) = (&setup.provider, &setup.server.api);

    let (status, body) = approved_after_expiry(api, provider).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "upstream_credentials_expired");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no refresh_token"),
        "{body}"
    );
    assert_eq!(body["error"]["details"]["status"], "failed", "{body}");
    // Nothing reached the upstream: not the static header, not an expired token.
    assert!(setup.authorizations().is_empty());
    assert_eq!(exchanges(provider).await, (1, 0));
}

crate::on_each_backend! {
    #[tokio::test]
    async fn an_approval_after_the_callers_token_expired_runs_on_the_refresh_token;
    #[tokio::test]
    async fn an_approval_after_the_callers_token_expired_without_a_refresh_token_sends_nothing;
}

#[tokio::test]
async fn an_openapi_upstream_sends_each_callers_exchanged_token_as_its_bearer() {
    use std::sync::{Arc, Mutex};
    // The API: records the `Authorization` of each request.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorded = seen.clone();
    let app = axum::Router::new().route(
        "/whoami",
        axum::routing::get(async move |headers: axum::http::HeaderMap| {
            let authorization = headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned());
            recorded
                .lock()
                .unwrap()
                .push(authorization.unwrap_or_default());
            axum::Json(json!({"authorized": true}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let data = temp_dir();
    let document = json!({
        "openapi": "3.1.0", "info": {"title": "whoami", "version": "1"},
        "components": {"securitySchemes": {"corp": {"type": "http", "scheme": "bearer"}}},
        "security": [{"corp": []}],
        "paths": {"/whoami": {"get": {"operationId": "whoami", "responses": {"200": {
            "description": "who", "content": {"application/json": {"schema": {"type": "object"}}}}}}}},
    });
    let path = data.path().join("whoami.json");
    std::fs::write(&path, document.to_string()).unwrap();
    let provider = Provider::start(json!({}));
    let config = config(&provider, "http://unused.test/mcp", "").replace(
        "url = \"http://unused.test/mcp\"",
        &format!(
            "openapi = {:?}\nbase_url = \"http://{api_addr}\"",
            path.to_str().unwrap()
        ),
    );
    let server = serve(data.path(), &config);
    let api = &server.api;
    served(api).await;

    let rs = provider.machine_token("machine-rs256", "tools:call").await;
    let es = provider.machine_token("machine-es256", "tools:call").await;
    for token in [&rs, &es] {
        let (status, body) = whoami(api, token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // Each request carried its caller's exchanged token, in place of the entry's static header.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let subjects: Vec<Value> = seen.iter().map(|a| claims(a)["sub"].clone()).collect();
    assert_eq!(subjects, [json!("machine-rs256"), json!("machine-es256")]);
    for authorization in &seen {
        assert_eq!(claims(authorization)["aud"], AUDIENCE);
        assert_ne!(authorization, STATIC);
    }

    // A key has no token to exchange: refused, and nothing is sent.
    let (status, body) = whoami(api, ADMIN).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "upstream_credentials_missing");
}
