//! Bearer tokens from a real identity provider (`tests/oidc/provider.mjs`, oidc-provider on
//! 127.0.0.1): machine tokens signed RS256, PS256, ES256 and EdDSA call tools over REST and
//! `/mcp` as `<issuer>:<sub>`; every forged, foreign, stale or misdirected token is `401` with
//! `error="invalid_token"`; a rotated key is picked up, a flood of unknown `kid`s costs the
//! provider at most one fetch, and a stopped provider leaves the cached keys working; grants give
//! roles, and a caller's token never approves.

mod common;

use base64::Engine;
use common::oidc::{Provider, RESOURCE};
use common::{Api, Backend, Location, Site, TestServer, assert_error};
use hmac::Mac;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use toolgate::http::auth::{ApiKey, Role, token_sha256};
use toolgate::identity::{IssuerConfig, Issuers};
use toolgate::{ServerBuilder, ToolSet};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The issuer `name` trusting `provider`'s tokens for [`RESOURCE`]: `tools:call` makes a
/// caller, the `finance` group an approver.
fn issuer(name: &str, provider: &Provider) -> IssuerConfig {
    let toml = format!(
        "name = \"{name}\"\nissuer = \"{}\"\naudiences = [\"{RESOURCE}\"]\n\
         [[grants]]\nwhen = {{ scope = \"tools:call\" }}\nrole = \"caller\"\n\
         [[grants]]\nwhen = {{ claim = \"groups\", contains = \"finance\" }}\nrole = \"approver\"\n",
        provider.issuer
    );
    toml::from_str(&toml).unwrap()
}

/// The admin API key's token, beside the issuer's tokens.
const ADMIN: &str = "admin-token-identity";

async fn server(location: &Location, issuer: IssuerConfig) -> TestServer {
    server_of(location, Issuers::new(&[issuer]).unwrap()).await
}

async fn server_of(location: &Location, issuers: Issuers) -> TestServer {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let admin = ApiKey::new("root", Role::Admin, token_sha256(ADMIN));
    TestServer::start_with(tools, location, |builder: ServerBuilder| {
        builder.api_keys(vec![admin]).issuers(issuers)
    })
    .await
}

/// One request as `token`: a POST of `body`, or a GET without one.
async fn send(
    api: &Api,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, Option<String>, Value) {
    let method = if body.is_some() {
        Method::POST
    } else {
        Method::GET
    };
    common::send(api, method, path, body, token).await
}

async fn echo(api: &Api, token: &str) -> (StatusCode, Option<String>, Value) {
    let input = json!({"input": {"text": "hi"}});
    send(api, "/tools/echo/call", Some(input), Some(token)).await
}

/// Asserts `token` is refused with the invalid-token challenge; the message.
async fn refused(api: &Api, token: &str, what: &str) -> String {
    let (status, challenge, body) = echo(api, token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {body}");
    assert_eq!(
        challenge.as_deref(),
        Some("Bearer error=\"invalid_token\""),
        "{what}"
    );
    assert_error(&body, "unauthorized");
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// A `tools/call` over `/mcp` as `token`.
async fn mcp_call(api: &Api, token: &str) -> (StatusCode, Value) {
    let params = json!({"name": "echo", "arguments": {"text": "over mcp"}});
    let (status, _, body) = common::mcp_request(api, token, "tools/call", params).await;
    (status, body)
}

fn header_and_payload(token: &str) -> (Value, Value) {
    let mut parts = token.split('.');
    let mut next = || serde_json::from_slice(&B64.decode(parts.next().unwrap()).unwrap()).unwrap();
    (next(), next())
}

fn unsigned(header: &Value, payload: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        B64.encode(header.to_string()),
        B64.encode(payload.to_string())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_tokens_of_every_algorithm_call_tools_over_rest_and_mcp() {
    let provider = Provider::start(json!({}));
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, issuer("corp", &provider)).await;
    let api = &server.api;
    for client in [
        "machine-rs256",
        "machine-ps256",
        "machine-es256",
        "machine-eddsa",
    ] {
        let token = provider.machine_token(client, "tools:call").await;
        let (status, _, body) = echo(api, &token).await;
        assert_eq!(status, StatusCode::OK, "{client}: {body}");
        let call_id = body["call_id"].as_str().unwrap();
        let (status, _, record) = send(api, &format!("/calls/{call_id}"), None, Some(&token)).await;
        assert_eq!(status, StatusCode::OK, "{record}");
        assert_eq!(record["caller"], format!("corp:{client}"));

        let (status, body) = mcp_call(api, &token).await;
        assert_eq!(status, StatusCode::OK, "{client} over /mcp: {body}");
        assert_eq!(body["result"]["isError"], false, "{body}");
    }
    // No credentials: the challenge without an error (RFC 6750).
    let (status, challenge, _) = send(api, "/tools", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    // A caller's token lists tools but never reaches the approvals.
    let token = provider.machine_token("machine-es256", "tools:call").await;
    let (status, _, _) = send(api, "/tools", None, Some(&token)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = send(api, "/approvals", None, Some(&token)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_foreign_stale_and_misdirected_tokens_are_refused() {
    let provider = Provider::start(json!({}));
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, issuer("refusals", &provider)).await;
    let api = &server.api;
    let good = provider.machine_token("machine-rs256", "tools:call").await;
    assert_eq!(echo(api, &good).await.0, StatusCode::OK);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();

    let other = provider
        .machine_token_for("machine-es256", "tools:call", "https://elsewhere.test/mcp")
        .await;
    let message = refused(api, &other, "another audience").await;
    assert!(message.contains("aud"), "{message}");

    let foreign = provider
        .sign(
            json!({"alg": "ES256", "claims": {"iss": "https://evil.test", "aud": RESOURCE,
                     "sub": "x", "scope": "tools:call"}}),
        )
        .await;
    refused(api, &foreign, "another issuer").await;

    let expired = provider
        .sign(
            json!({"alg": "ES256", "claims": {"aud": RESOURCE, "sub": "x",
                     "scope": "tools:call", "iat": now - 3600, "exp": now - 600}}),
        )
        .await;
    let message = refused(api, &expired, "expired").await;
    assert!(message.contains("expired"), "{message}");

    let early = provider
        .sign(
            json!({"alg": "EdDSA", "claims": {"aud": RESOURCE, "sub": "x",
                     "scope": "tools:call", "nbf": now + 600}}),
        )
        .await;
    let message = refused(api, &early, "not yet valid").await;
    assert!(message.contains("not valid yet"), "{message}");

    // Within the leeway (60 s), an expiry just past is still accepted.
    let lenient = provider
        .sign(
            json!({"alg": "ES256", "claims": {"aud": RESOURCE, "sub": "x",
                     "scope": "tools:call", "exp": now - 10}}),
        )
        .await;
    assert_eq!(echo(api, &lenient).await.0, StatusCode::OK);

    let (header, payload) = header_and_payload(&good);
    let none = unsigned(&json!({"alg": "none", "typ": "at+jwt"}), &payload, "");
    refused(api, &none, "alg none").await;

    // HS256 keyed with the issuer's public RSA key, as the classic confusion attack does.
    let jwks: Value = reqwest::get(format!("{}/jwks", provider.issuer))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rsa = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|key| key["kid"] == header["kid"])
        .unwrap();
    let hs_header = json!({"alg": "HS256", "typ": "at+jwt", "kid": header["kid"]});
    let signing_input = format!(
        "{}.{}",
        B64.encode(hs_header.to_string()),
        B64.encode(payload.to_string())
    );
    for secret in [rsa.to_string(), rsa["n"].as_str().unwrap().to_owned()] {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(signing_input.as_bytes());
        let forged = format!(
            "{signing_input}.{}",
            B64.encode(mac.finalize().into_bytes())
        );
        refused(api, &forged, "HS256 with the public key").await;
    }

    // The payload changed under a valid signature: more scope, another subject.
    let signature = good.rsplit('.').next().unwrap();
    let mut more = payload.clone();
    more["sub"] = json!("machine-admin");
    let tampered = unsigned(&header, &more, signature);
    let message = refused(api, &tampered, "tampered").await;
    assert!(message.contains("signature"), "{message}");

    let typed = provider
        .sign(json!({"alg": "ES256", "header": {"typ": "dpop+jwt"},
                     "claims": {"aud": RESOURCE, "sub": "x", "scope": "tools:call"}}))
        .await;
    refused(api, &typed, "another typ").await;
    // A header naming critical parameters toolgate does not understand (RFC 7515 4.1.11),
    // though the signature and every claim are good.
    let critical = provider
        .sign(
            json!({"alg": "ES256", "header": {"typ": "at+jwt", "crit": ["exp"]},
                     "claims": {"aud": RESOURCE, "sub": "x", "scope": "tools:call"}}),
        )
        .await;
    let message = refused(api, &critical, "a crit header").await;
    assert!(message.contains("crit"), "{message}");
    // An ID token is no access token, even with the right audience.
    let id_token = provider
        .sign(json!({"alg": "RS256", "header": {"typ": "JWT"},
                     "claims": {"aud": RESOURCE, "sub": "dana", "scope": "tools:call",
                                "nonce": "n-1"}}))
        .await;
    let message = refused(api, &id_token, "an ID token").await;
    assert!(message.contains("ID token"), "{message}");
    refused(api, "not-a-token", "not a JWT").await;

    // A valid token that no grant admits: 403, not 401.
    let ungranted = provider.machine_token("machine-es256", "refunds").await;
    let (status, _, body) = echo(api, &ungranted).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error(&body, "forbidden");
    // Only the two accepted tokens ran a tool. An echo is recorded behind its answer, so its
    // record reaches the file with the writer's next batch: wait for both, then count.
    let stored = common::eventually("the accepted calls are recorded", async || {
        let stored = location.stored_calls().await;
        (stored.len() >= 2).then_some(stored)
    })
    .await;
    assert_eq!(stored.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_picked_up_and_unknown_kids_cost_at_most_one_fetch() {
    let mut provider = Provider::start(json!({}));
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, issuer("rotation", &provider)).await;
    let api = &server.api;
    provider.reset_counts().await;

    // Made-up key ids, all at once, before the set was ever fetched: they wait for one fetch
    // together, and are refused by what it brings.
    let mut flood = Vec::new();
    for i in 0..100 {
        let token = provider
            .sign(
                json!({"alg": "ES256", "header": {"kid": format!("made-up-{i}")},
                         "claims": {"aud": RESOURCE, "sub": "x", "scope": "tools:call"}}),
            )
            .await;
        flood.push(token);
    }
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(flood.len()));
    let answers: Vec<_> = flood
        .into_iter()
        .map(|token| {
            let (api, start) = (api.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                echo(&api, &token).await.0
            })
        })
        .collect();
    for answer in answers {
        assert_eq!(answer.await.unwrap(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(
        provider.counts().await["jwks"],
        1,
        "one fetch for 100 unknown kids"
    );
    // The set that fetch brought serves a real token without another.
    let first = provider.machine_token("machine-es256", "tools:call").await;
    assert_eq!(echo(api, &first).await.0, StatusCode::OK);
    assert_eq!(provider.counts().await["jwks"], 1);

    // The provider rotates; once the 30 s are past, the first token signed with the new key
    // fetches the set again and is accepted.
    let kid = provider.rotate("ES256").await;
    let rotated = provider.machine_token("machine-es256", "tools:call").await;
    assert_eq!(header_and_payload(&rotated).0["kid"], kid.as_str());
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;
    let (status, _, body) = echo(api, &rotated).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(provider.counts().await["jwks"], 2);

    // With the provider gone (and the 30 s past again, so a fetch is tried and fails), the
    // cached keys keep working and an unknown key fails closed.
    let stranger = provider
        .sign(json!({"alg": "ES256", "header": {"kid": "never-published"},
                     "claims": {"aud": RESOURCE, "sub": "x", "scope": "tools:call"}}))
        .await;
    provider.stop();
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;
    refused(api, &stranger, "an unknown key, the provider down").await;
    assert_eq!(echo(api, &first).await.0, StatusCode::OK);
    assert_eq!(echo(api, &rotated).await.0, StatusCode::OK);

    // The admin's API key still works beside the tokens, and sees what was checked.
    let metrics = api.metrics(ADMIN).await;
    let series = |line: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("no {line} in\n{metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        series("toolgate_token_verifications_total{issuer=\"rotation\",result=\"accepted\"}"),
        4
    );
    assert_eq!(
        series("toolgate_token_verifications_total{issuer=\"rotation\",result=\"unknown_key\"}"),
        101
    );
    let fetched = series("toolgate_key_set_fetches_total{issuer=\"rotation\",result=\"fetched\"}");
    assert_eq!(
        fetched, 2,
        "the first token, and the rotated key once the 30 s were past"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_kid_with_stale_claims_does_not_hold_up_a_rotation() {
    let provider = Provider::start(json!({}));
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, issuer("held-up", &provider)).await;
    let api = &server.api;
    let first = provider.machine_token("machine-es256", "tools:call").await;
    assert_eq!(echo(api, &first).await.0, StatusCode::OK);
    provider.reset_counts().await;
    // Past the issuer's 30 s window: the next fetch may happen at once.
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;

    // Made-up key ids whose claims no key could make acceptable (expired; another audience):
    // refused for them, without a fetch.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let stale = provider
        .sign(json!({"alg": "ES256", "header": {"kid": "made-up-stale"},
                     "claims": {"aud": RESOURCE, "sub": "x", "scope": "tools:call",
                                "iat": now - 3600, "exp": now - 600}}))
        .await;
    let message = refused(api, &stale, "a made-up kid, expired").await;
    assert!(message.contains("expired"), "{message}");
    let elsewhere = provider
        .sign(json!({"alg": "ES256", "header": {"kid": "made-up-aud"},
                     "claims": {"aud": "https://elsewhere.test/mcp", "sub": "x",
                                "scope": "tools:call"}}))
        .await;
    refused(api, &elsewhere, "a made-up kid, another audience").await;
    assert_eq!(provider.counts().await["jwks"], 0, "no fetch for either");

    // So the provider's rotation is picked up by its first token, at once.
    let kid = provider.rotate("ES256").await;
    let rotated = provider.machine_token("machine-es256", "tools:call").await;
    assert_eq!(header_and_payload(&rotated).0["kid"], kid.as_str());
    let (status, _, body) = echo(api, &rotated).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(provider.counts().await["jwks"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approvers_token_decides_and_a_callers_never_does() {
    let provider = Provider::start(json!({"clients": [
        {"client_id": "machine-rs256", "access_token_claims": {"groups": ["finance"]}}
    ]}));
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, issuer("grants", &provider)).await;
    let api = &server.api;
    let caller = provider.machine_token("machine-es256", "tools:call").await;
    let approver = provider.machine_token("machine-rs256", "refunds").await;
    let refund = json!({"input": {"order_id": "o-1", "amount_cents": 25_000, "reason": "damaged"}});
    let (status, _, body) =
        send(api, "/tools/issue_refund/call", Some(refund), Some(&caller)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();

    let approve = format!("/approvals/{token}/approve");
    let answer = json!({"input": {"note": "ok"}});
    let (status, _, body) = send(api, &approve, Some(answer.clone()), Some(&caller)).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a caller's token never approves: {body}"
    );
    let (status, _, body) = echo(api, &approver).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an approver calls no tool: {body}"
    );
    let (status, _, body) = send(api, &approve, Some(answer), Some(&approver)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    let call_id = body["call_id"].as_str().unwrap();
    let (_, _, record) = send(api, &format!("/calls/{call_id}"), None, Some(&approver)).await;
    let approved = record["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["kind"] == "approved")
        .unwrap();
    assert_eq!(approved["actor"], "grants:machine-rs256", "{record}");

    // Both grants at once: whoever calls never decides, so no role at all.
    let both = provider.machine_token("machine-rs256", "tools:call").await;
    let (status, _, body) = echo(api, &both).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

/// The variable holding the introspection client's secret, in the tests' environments.
const SECRET_ENV: &str = "IDENTITY_TEST_INTROSPECTION_SECRET";

/// [`issuer`] `name`, introspecting opaque tokens at `provider` as the client `toolgate`.
fn introspecting(name: &str, provider: &Provider) -> IssuerConfig {
    let mut config = issuer(name, provider);
    config.introspection_url = Some(format!("{}/token/introspection", provider.issuer));
    config.introspection_client_id = Some("toolgate".into());
    config.introspection_secret_env = Some(SECRET_ENV.into());
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_token_is_introspected_once_and_an_inactive_one_refused() {
    let provider = Provider::start(json!({}));
    let config = introspecting("opaque", &provider);
    let secret =
        |value: &'static str| move |name: &str| (name == SECRET_ENV).then(|| value.to_owned());

    let missing = Issuers::with_env(std::slice::from_ref(&config), |_| None).unwrap_err();
    assert!(missing.0.contains(SECRET_ENV), "{missing}");

    let location = Location::new(Backend::Sqlite).await;
    let issuers =
        Issuers::with_env(std::slice::from_ref(&config), secret("toolgate-secret")).unwrap();
    let server = server_of(&location, issuers).await;
    let api = &server.api;
    let opaque = provider.machine_token("machine-opaque", "tools:call").await;
    assert!(!opaque.contains('.'), "an opaque token: {opaque}");
    provider.reset_counts().await;
    for _ in 0..3 {
        let (status, _, body) = echo(api, &opaque).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(
        provider.counts().await["introspection"],
        1,
        "one introspection, then the cache"
    );
    let call_id = echo(api, &opaque).await.2["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, _, record) = send(api, &format!("/calls/{call_id}"), None, Some(&opaque)).await;
    assert_eq!(record["caller"], "opaque:machine-opaque", "{record}");

    // A token the provider does not know is refused, and asked about once.
    provider.reset_counts().await;
    for _ in 0..3 {
        let message = refused(api, "made-up-opaque-token", "an inactive token").await;
        assert!(message.contains("not active"), "{message}");
    }
    assert_eq!(provider.counts().await["introspection"], 1);
    // Active, but for another server.
    let elsewhere = provider
        .machine_token_for("machine-opaque", "tools:call", "https://elsewhere.test/mcp")
        .await;
    let message = refused(api, &elsewhere, "another audience").await;
    assert!(message.contains("aud"), "{message}");

    // Introspection refused (a wrong secret): fails closed.
    let location = Location::new(Backend::Sqlite).await;
    let issuers = Issuers::with_env(&[config], secret("not-the-secret")).unwrap();
    let wrong = server_of(&location, issuers).await;
    let message = refused(&wrong.api, &opaque, "introspection refused").await;
    assert!(message.contains("could not be checked"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_made_up_bearers_spend_its_own_introspections_not_everyones() {
    let provider = Provider::start(json!({}));
    let config = introspecting("flooded", &provider);
    let env = |name: &str| (name == SECRET_ENV).then(|| "toolgate-secret".to_owned());
    let location = Location::new(Backend::Sqlite).await;
    let server = server_of(&location, Issuers::with_env(&[config], env).unwrap()).await;
    let api = &server.api;
    let opaque = provider.machine_token("machine-opaque", "tools:call").await;
    provider.reset_counts().await;

    // What cannot be a token is never sent.
    for garbage in ["two words", "<script>x</script>", "short"] {
        let message = refused(api, garbage, "not a token").await;
        assert!(message.contains("neither a JWT"), "{message}");
    }
    assert_eq!(provider.counts().await["introspection"], 0);
    // Forty made-up bearers from one address: its allowance (10 at once) is spent, then each
    // is refused without asking the provider.
    let mut limited = 0;
    for i in 0..40 {
        let message = refused(api, &format!("made-up-bearer-{i:04}"), "a made-up bearer").await;
        limited += usize::from(message.contains("too many new tokens"));
    }
    let asked = provider.counts().await["introspection"].as_u64().unwrap();
    assert!(
        (10..=12).contains(&asked),
        "{asked} introspections for 40 bearers"
    );
    assert!(limited >= 28, "{limited} refused unasked");
    // Another address's real token is introspected, and accepted.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let response = other
        .post(format!("{}/tools/echo/call", api.base))
        .bearer_auth(&opaque)
        .json(&json!({"input": {"text": "hi"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The flooding address's own cached answers still serve it.
    let message = refused(api, "made-up-bearer-0000", "a made-up bearer, cached").await;
    assert!(message.contains("not active"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_points_at_the_protected_resource_metadata() {
    let provider = Provider::start(json!({}));
    let location = Location::new(Backend::Sqlite).await;
    let issuers = Issuers::new(&[issuer("prm", &provider)])
        .unwrap()
        .for_resource(RESOURCE, &[])
        .unwrap();
    let server = server_of(&location, issuers).await;
    let api = &server.api;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (status, _, document) = send(api, path, None, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {document}");
        assert_eq!(document["resource"], RESOURCE);
        assert_eq!(document["authorization_servers"], json!([provider.issuer]));
        assert_eq!(document["scopes_supported"], json!(["tools:call"]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    let metadata = "resource_metadata=\"https://toolgate.test/.well-known/oauth-protected-resource/mcp\", scope=\"tools:call\"";
    let response = api
        .client
        .post(format!("{}/mcp", api.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        format!("Bearer {metadata}").as_str()
    );
    let (status, challenge, _) = send(api, "/tools", None, Some("not-a-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge.as_deref(),
        Some(format!("Bearer error=\"invalid_token\", {metadata}").as_str())
    );
    // A refusal decided after a fetch of the key set carries it too.
    let unknown = provider
        .sign(json!({"alg": "ES256", "header": {"kid": "not-in-the-set"},
                     "claims": {"aud": RESOURCE, "sub": "x", "scope": "tools:call"}}))
        .await;
    let (status, challenge, _) = send(api, "/tools", None, Some(&unknown)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge.as_deref(),
        Some(format!("Bearer error=\"invalid_token\", {metadata}").as_str())
    );
    // A valid token is let through; the admin's key still works.
    let token = provider.machine_token("machine-es256", "tools:call").await;
    assert_eq!(echo(api, &token).await.0, StatusCode::OK);
    assert_eq!(
        send(api, "/tools", None, Some(ADMIN)).await.0,
        StatusCode::OK
    );

    // Without identity providers there is no such document: a client with a static key must
    // not be sent off to sign in somewhere.
    let location = Location::new(Backend::Sqlite).await;
    let plain = TestServer::start(ToolSet::new(), &location).await;
    let (status, _, _) = send(
        &plain.api,
        "/.well-known/oauth-protected-resource",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
