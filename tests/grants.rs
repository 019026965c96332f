//! What a principal reaches, from its grants (`[[auth.issuers.grants]]`) or its key
//! (`[[auth.keys]]`), configured as an operator writes it: a tool outside its `tools` does not
//! exist for it on any door (every `GET /tools` format, one tool's descriptor, the OpenAPI
//! document, `/mcp`'s `tools/list` and `tools/call`); an approval outside its `decides` is absent
//! from `/approvals`, `/calls` and `/events` and `unknown_token` when decided; and a tool's
//! `required_scopes` answer a token without them `403 insufficient_scope` with the challenge an
//! MCP client steps up from, on REST and on `/mcp`, a broader scope of the hierarchy sufficing.
//! Tokens come from the real test provider (`tests/oidc/provider.mjs`).

mod common;

use std::time::Duration;

use common::events::{events_until, open_events};
use common::oidc::{Provider, RESOURCE};
use common::{Api, Backend, Location, Site, TestServer, assert_error};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use toolgate::ServerBuilder;
use toolgate::config::Config;

/// The admin key's token.
const ADMIN: &str = "admin-token-grants";
/// A key that may decide only `ask_human`'s approvals.
const SUPPORT_KEY: &str = "support-key-token";
/// A caller key reaching only `echo`.
const ECHO_KEY: &str = "echo-key-token";

/// The operator's file: the provider's tokens for [`RESOURCE`] (`tools:call` calls three tools;
/// the `echo-only` group calls `echo` alone; `finance` decides refunds, `support` questions),
/// keys beside them, and refunds requiring `refunds:write`.
fn config(provider: &Provider) -> Config {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    Config::from_toml(&format!(
        r#"
[auth]
resource_url = "{RESOURCE}"

[[auth.keys]]
name = "root"
role = "admin"
token_sha256 = "{admin}"

[[auth.keys]]
name = "support-desk"
role = "approver"
token_sha256 = "{support}"
decides = ["ask_*"]

[[auth.keys]]
name = "echo-agent"
role = "caller"
token_sha256 = "{echo}"
tools = ["echo"]

[[auth.issuers]]
name = "corp"
issuer = "{issuer}"
audiences = ["{RESOURCE}"]

[[auth.issuers.grants]]
when = {{ scope = "tools:call" }}
role = "caller"
tools = ["echo", "ask_human", "issue_*"]

[[auth.issuers.grants]]
when = {{ claim = "groups", contains = "echo-only" }}
role = "caller"
tools = ["echo"]

[[auth.issuers.grants]]
when = {{ claim = "groups", contains = "finance" }}
role = "approver"
decides = ["issue_refund"]

[[auth.issuers.grants]]
when = {{ claim = "groups", contains = "support" }}
role = "approver"
decides = ["ask_human"]

[tools.issue_refund]
required_scopes = ["refunds:write"]
"#,
        admin = hash(ADMIN),
        support = hash(SUPPORT_KEY),
        echo = hash(ECHO_KEY),
        issuer = provider.issuer,
    ))
    .unwrap()
}

/// The provider, with a client per group: `machine-rs256` is in `finance`, `machine-ps256`
/// in `support`, `machine-eddsa` in `echo-only`; `machine-es256` is in none.
fn provider() -> Provider {
    Provider::start(json!({"clients": [
        {"client_id": "machine-rs256", "access_token_claims": {"groups": ["finance"]}},
        {"client_id": "machine-ps256", "access_token_claims": {"groups": ["support"]}},
        {"client_id": "machine-eddsa", "access_token_claims": {"groups": ["echo-only"]}},
    ]}))
}

async fn server(location: &Location, config: &Config) -> TestServer {
    let mut tools = toolgate::ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let keys = config.api_keys().unwrap();
    let issuers = config.issuers().unwrap();
    let dispatch = config.dispatch_config();
    TestServer::start_with(tools, location, |builder: ServerBuilder| {
        builder
            .api_keys(keys)
            .issuers(issuers)
            .dispatch_config(dispatch)
    })
    .await
}

async fn get(api: &Api, path: &str, token: &str) -> (StatusCode, Value) {
    let (status, _, body) = common::send(api, Method::GET, path, None, Some(token)).await;
    (status, body)
}

async fn post(
    api: &Api,
    path: &str,
    body: Value,
    token: &str,
) -> (StatusCode, Option<String>, Value) {
    common::send(api, Method::POST, path, Some(body), Some(token)).await
}

/// The names of a tool list (`{"tools": [...]}`), whatever its format: each entry's `name`,
/// or its `function.name` (OpenAI's chat format), or every `functionDeclarations` name
/// (Gemini's).
fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for tool in list["tools"].as_array().unwrap() {
        if let Some(name) = tool["name"].as_str().or(tool["function"]["name"].as_str()) {
            names.push(name.to_owned());
        }
        for declared in tool["functionDeclarations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            names.push(declared["name"].as_str().unwrap().to_owned());
        }
    }
    names.sort();
    names
}

/// One JSON-RPC request to `/mcp` as `token`: the HTTP status, `WWW-Authenticate`, the body.
async fn mcp(
    api: &Api,
    token: &str,
    method: &str,
    params: Value,
) -> (StatusCode, Option<String>, Value) {
    common::mcp_request(api, token, method, params).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_outside_a_principals_tools_does_not_exist_for_it_on_any_door() {
    let provider = provider();
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, &config(&provider)).await;
    let api = &server.api;
    let all = ["ask_human", "echo", "issue_refund", "send_email"];
    let wide = provider
        .machine_token("machine-es256", "tools:call refunds")
        .await;
    let narrow = provider.machine_token("machine-eddsa", "").await;

    for (who, token, expected) in [
        ("the admin key", ADMIN, &all[..]),
        (
            "a tools:call token",
            wide.as_str(),
            &["ask_human", "echo", "issue_refund"][..],
        ),
        ("an echo-only token", narrow.as_str(), &["echo"][..]),
        ("an echo-only key", ECHO_KEY, &["echo"][..]),
    ] {
        for format in [
            "",
            "?format=openai",
            "?format=anthropic",
            "?format=gemini",
            "?format=mcp",
        ] {
            let (status, list) = get(api, &format!("/tools{format}"), token).await;
            assert_eq!(status, StatusCode::OK, "{who} {format}: {list}");
            assert_eq!(names(&list), expected, "{who} lists {format}: {list}");
        }
        let (_, document) = get(api, "/openapi.json", token).await;
        let mut operations: Vec<&str> = document["paths"]
            .as_object()
            .unwrap()
            .keys()
            .filter_map(|path| path.strip_prefix("/tools/")?.strip_suffix("/call"))
            .filter(|name| *name != "{name}")
            .collect();
        operations.sort();
        assert_eq!(operations, expected, "{who}'s OpenAPI document");

        let (status, _, listed) = mcp(api, token, "tools/list", json!({})).await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let mut listed = names(&listed["result"]);
        listed.retain(|name| name != "toolgate_await_call");
        assert_eq!(listed, expected, "{who} over /mcp");

        for hidden in all.iter().filter(|name| !expected.contains(name)) {
            let (status, body) = get(api, &format!("/tools/{hidden}"), token).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{who} reads {hidden}: {body}"
            );
            assert_error(&body, "unknown_tool");
            let input = json!({"input": {"to": "a@example.test", "subject": "s", "body": "b"}});
            let (status, _, body) = post(api, &format!("/tools/{hidden}/call"), input, token).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{who} calls {hidden}: {body}"
            );
            assert_error(&body, "unknown_tool");
            let params = json!({"name": hidden, "arguments": {}});
            let (status, _, body) = mcp(api, token, "tools/call", params).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(
                body["error"]["code"], -32602,
                "{who} calls {hidden} over /mcp: {body}"
            );
        }
    }
    // What a principal reaches, it calls.
    let (status, _, body) = post(
        api,
        "/tools/echo/call",
        json!({"input": {"text": "hi"}}),
        &narrow,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["text"], "hi");
}

/// Calls `tool` with `input` as `token`, expecting it to suspend: its call id and token.
async fn suspended(api: &Api, tool: &str, input: Value, token: &str) -> (String, String) {
    let (status, _, body) = post(
        api,
        &format!("/tools/{tool}/call"),
        json!({"input": input}),
        token,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{tool}: {body}");
    (
        body["call_id"].as_str().unwrap().to_owned(),
        body["suspension"]["token"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_outside_an_approvers_decides_does_not_exist_for_it() {
    let provider = provider();
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, &config(&provider)).await;
    let api = &server.api;
    let caller = provider
        .machine_token("machine-es256", "tools:call refunds:write")
        .await;
    let finance = provider.machine_token("machine-rs256", "").await;
    let mut finance_events = open_events(api, &finance).await;
    let mut support_events = open_events(api, SUPPORT_KEY).await;

    let refund = json!({"order_id": "o-1", "amount_cents": 25_000, "reason": "damaged"});
    let (refund_call, refund_token) = suspended(api, "issue_refund", refund, &caller).await;
    let (question_call, question_token) =
        suspended(api, "ask_human", json!({"question": "Ship it?"}), &caller).await;
    // One more of each, last: a stream that reached it has shown all it would.
    let second = json!({"order_id": "o-2", "amount_cents": 25_000, "reason": "damaged"});
    let (last_refund, _) = suspended(api, "issue_refund", second, &caller).await;
    let (last_question, _) =
        suspended(api, "ask_human", json!({"question": "Again?"}), &caller).await;

    for (who, token, own, own_token, own_last, other, other_token, events) in [
        (
            "finance",
            finance.as_str(),
            &refund_call,
            &refund_token,
            &last_refund,
            &question_call,
            &question_token,
            &mut finance_events,
        ),
        (
            "the support key",
            SUPPORT_KEY,
            &question_call,
            &question_token,
            &last_question,
            &refund_call,
            &refund_token,
            &mut support_events,
        ),
    ] {
        let (status, page) = get(api, "/approvals", token).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let listed: Vec<&str> = page["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|approval| approval["call_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            listed,
            [own.as_str(), own_last.as_str()],
            "{who}'s queue: {page}"
        );
        // A page of one, followed to its end, never shows the other tool's either.
        let (mut seen, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let path = match &cursor {
                Some(after) => format!("/approvals?limit=1&cursor={after}"),
                None => "/approvals?limit=1".to_owned(),
            };
            let (_, page) = get(api, &path, token).await;
            for approval in page["approvals"].as_array().unwrap() {
                seen.push(approval["call_id"].as_str().unwrap().to_owned());
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(
            seen,
            [own.as_str(), own_last.as_str()],
            "{who}, page by page"
        );

        let (status, body) = get(api, &format!("/approvals/{own_token}"), token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = get(api, &format!("/approvals/{other_token}"), token).await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "{who} reads another's: {body}"
        );
        assert_error(&body, "unknown_token");
        for decision in ["approve", "reject", "complete"] {
            let body = match decision {
                "approve" => json!({"input": {"answer": "yes"}}),
                "reject" => json!({"reason": "no"}),
                _ => json!({"output": {"answer": "done"}}),
            };
            let path = format!("/approvals/{other_token}/{decision}");
            let (status, _, body) = post(api, &path, body, token).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{who} {decision}s another's: {body}"
            );
            assert_error(&body, "unknown_token");
        }
        let (status, body) = get(api, &format!("/calls/{other}"), token).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_error(&body, "unknown_call");
        let (_, calls) = get(api, "/calls", token).await;
        let listed: Vec<&str> = calls["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| call["call_id"].as_str().unwrap())
            .collect();
        assert!(
            listed.contains(&own.as_str()) && !listed.contains(&other.as_str()),
            "{who}: {calls}"
        );

        let shown = events_until(events, own_last).await;
        assert!(
            shown
                .iter()
                .any(|event| event["call"]["call_id"] == own.as_str()),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .all(|event| event["call"]["tool"] == shown[0]["call"]["tool"]),
            "{who}'s stream shows one tool only: {shown:?}"
        );
    }

    // Each decides its own: the refund, approved by finance, runs and names the person.
    let path = format!("/approvals/{refund_token}/approve");
    let (status, _, body) = post(api, &path, json!({"input": {"note": "fine"}}), &finance).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, record) = get(api, &format!("/calls/{refund_call}"), ADMIN).await;
    let approved = record["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["kind"] == "approved")
        .cloned()
        .unwrap();
    assert_eq!(approved["actor"], "corp:machine-rs256");
    let path = format!("/approvals/{question_token}/approve");
    let (status, _, body) =
        post(api, &path, json!({"input": {"answer": "yes"}}), SUPPORT_KEY).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["answer"], "yes");
    // The caller sees its own calls whatever their tool, and still never decides.
    let (status, _) = get(api, &format!("/calls/{question_call}"), &caller).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get(api, "/approvals", &caller).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_a_required_scope_is_challenged_to_step_up_on_rest_and_mcp() {
    let provider = provider();
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location, &config(&provider)).await;
    let api = &server.api;
    let challenge = "Bearer error=\"insufficient_scope\", scope=\"refunds:write tools:call\", \
                     resource_metadata=\"https://toolgate.test/.well-known/oauth-protected-resource/mcp\"";
    let refund = json!({"order_id": "o-1", "amount_cents": 500, "reason": "late"});

    let short = provider.machine_token("machine-es256", "tools:call").await;
    let (status, header, body) = post(
        api,
        "/tools/issue_refund/call",
        json!({"input": refund}),
        &short,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(header.as_deref(), Some(challenge));
    let details = assert_error(&body, "insufficient_scope");
    assert_eq!(
        details,
        json!({"tool": "issue_refund", "scopes": ["refunds:write"]})
    );
    // The refusal comes before the input is read: a bad input is refused the same way.
    let (status, _, body) = post(
        api,
        "/tools/issue_refund/call",
        json!({"input": {}}),
        &short,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // `/mcp`: one HTTP request, answered with HTTP 403, so the client can step up.
    let params = json!({"name": "issue_refund", "arguments": refund});
    let (status, header, body) = mcp(api, &short, "tools/call", params.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(header.as_deref(), Some(challenge));
    assert_error(&body, "insufficient_scope");
    // Other requests of that token go on.
    let (status, _, body) = mcp(
        api,
        &short,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");

    // The exact scope, or a broader one of its hierarchy, will do.
    for scope in ["tools:call refunds:write", "tools:call refunds"] {
        let token = provider.machine_token("machine-es256", scope).await;
        let (status, _, body) = post(
            api,
            "/tools/issue_refund/call",
            json!({"input": refund}),
            &token,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{scope}: {body}");
        let (status, _, body) = mcp(api, &token, "tools/call", params.clone()).await;
        assert_eq!(status, StatusCode::OK, "{scope}: {body}");
        assert_eq!(body["result"]["isError"], false, "{scope}: {body}");
    }
    // A key's rights are its configuration: no scope is asked of it.
    let (status, _, body) = post(
        api,
        "/tools/issue_refund/call",
        json!({"input": refund}),
        ADMIN,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The metadata offers the scope.
    let (status, _, document) = common::send(
        api,
        Method::GET,
        "/.well-known/oauth-protected-resource/mcp",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        document["scopes_supported"],
        json!(["refunds:write", "tools:call"])
    );
}

#[test]
fn a_glob_or_scope_that_cannot_be_is_refused_at_start_naming_its_key() {
    for (toml, key) in [
        (
            "[[auth.keys]]\nname = \"a\"\nrole = \"caller\"\ntoken_sha256 = \"{hash}\"\ntools = [\"files/*\"]\n",
            "auth.keys[0].tools",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nrole = \"caller\"\ntoken_sha256 = \"{hash}\"\ndecides = [\"*\"]\n",
            "auth.keys[0].decides",
        ),
        (
            "[tools.echo]\nrequired_scopes = [\"refunds write\"]\n",
            "tools.echo.required_scopes",
        ),
        (
            "[tools.echo]\nrequired_scopes = []\n",
            "tools.echo.required_scopes",
        ),
    ] {
        let hash = "0".repeat(64);
        let toml = toml.replace("{hash}", &hash);
        let err = Config::from_toml(&toml)
            .and_then(|config| config.api_keys().map(drop))
            .unwrap_err();
        assert!(err.to_string().contains(key), "{toml}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoever_made_a_call_never_decides_it_and_an_admin_sees_its_own_calls() {
    let provider = provider();
    let location = Location::new(Backend::Sqlite).await;
    let mut config = config(&provider);
    // An admin key that decides only questions.
    let narrow = toolgate::http::auth::Reach::of(&["ask_*".to_owned()]).unwrap();
    let server = {
        let mut tools = toolgate::ToolSet::new();
        toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
        let mut keys = config.api_keys().unwrap();
        for key in keys.iter_mut().filter(|key| key.name == "root") {
            key.decides = narrow.clone();
        }
        let issuers = config.issuers().unwrap();
        let dispatch = config.dispatch_config();
        config.auth.keys.clear();
        TestServer::start_with(tools, &location, |builder: ServerBuilder| {
            builder
                .api_keys(keys)
                .issuers(issuers)
                .dispatch_config(dispatch)
        })
        .await
    };
    let api = &server.api;
    // Alice's agent calls as corp:alice; Alice, of finance, then holds an approver's token
    // under the same name: she never decides her own agent's call.
    let as_alice = |claims: Value| {
        let mut claims = claims;
        claims["aud"] = json!(RESOURCE);
        claims["sub"] = json!("alice");
        provider.sign(json!({"alg": "ES256", "claims": claims}))
    };
    let agent = as_alice(json!({"scope": "tools:call refunds"})).await;
    let alice = as_alice(json!({"groups": ["finance"]})).await;
    let refund = json!({"order_id": "o-a", "amount_cents": 25_000, "reason": "mine"});
    let (call_id, token) = suspended(api, "issue_refund", refund, &agent).await;
    for (decision, body) in [
        ("approve", json!({"input": {}})),
        ("reject", json!({"reason": "no"})),
        (
            "complete",
            json!({"output": {"refund_id": "r", "status": "issued", "amount_cents": 1}}),
        ),
    ] {
        let path = format!("/approvals/{token}/{decision}");
        let (status, _, body) = post(api, &path, body, &alice).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{decision}: {body}");
        assert_eq!(
            assert_error(&body, "forbidden"),
            json!({"call_id": call_id})
        );
    }
    // Another of finance reads it undecided, and decides it.
    let finance = provider.machine_token("machine-rs256", "").await;
    let (_, record) = get(api, &format!("/calls/{call_id}"), &finance).await;
    assert_eq!(
        record["status"], "suspended",
        "nothing was decided: {record}"
    );
    let path = format!("/approvals/{token}/approve");
    let (status, _, body) = post(api, &path, json!({"input": {}}), &finance).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The admin key decides only questions, yet reads its own calls of any tool, and not
    // another's refund.
    let mine = json!({"order_id": "o-b", "amount_cents": 25_000, "reason": "admin"});
    let (own, _) = suspended(api, "issue_refund", mine, ADMIN).await;
    let (status, body) = get(api, &format!("/calls/{own}"), ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let theirs = json!({"order_id": "o-c", "amount_cents": 25_000, "reason": "agent"});
    let (other, _) = suspended(api, "issue_refund", theirs, &agent).await;
    let (status, _) = get(api, &format!("/calls/{other}"), ADMIN).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A page left empty by `decides`, with more after it, is answered at once, even held:
    // ten refunds pending, more than one page's rounds read.
    for n in 0..8 {
        let refund = json!({"order_id": format!("o-{n}"), "amount_cents": 25_000, "reason": "x"});
        suspended(api, "issue_refund", refund, &agent).await;
    }
    let (_, page) = get(api, "/approvals?limit=1", ADMIN).await;
    assert_eq!(page["approvals"], json!([]), "{page}");
    assert!(page["next_cursor"].is_string(), "{page}");
    let response = api
        .client
        .get(format!("{}/approvals?limit=1&wait=50", api.base))
        .bearer_auth(ADMIN)
        .timeout(Duration::from_secs(25))
        .send()
        .await
        .expect("answered without waiting out the hold");
    let page: Value = response.json().await.unwrap();
    assert_eq!(page["approvals"], json!([]), "{page}");
    assert!(page["next_cursor"].is_string(), "{page}");
}
