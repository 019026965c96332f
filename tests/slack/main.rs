//! Slack (issue 35): the interactions door `POST /integrations/slack/interactions`, with
//! requests signed by Slack's own SDK (`slack_sdk`'s `SignatureVerifier`, through `sign.py`)
//! and a local stand-in for Slack's `response_url`; and the Block Kit of the messages, judged by
//! the SDK's models (`check_blocks.py`). One binary, a module per concern.

#[path = "../common/mod.rs"]
mod common;

mod binary;
mod blocks;
mod door;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use toolgate::config::Config;
use toolgate::rest::SlackInteractions;

use common::{Site, TestServer, ci_python, repo_root};

/// The Slack app's signing secret.
const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const ADMIN: &str = "admin-token-0123456789";
const OPS: &str = "ops-token-0123456789";
const AGENT: &str = "agent-token-0123456789";
const LEAD: &str = "lead-token-0123456789";

/// Keys, people and policies: `ops` (an approver, Slack user `U0OPS`) decides everything;
/// `corp:bob` (`U0BOB`) decides only `files__*`; `agent` (`U0AGENT`) is a caller; `lead`
/// (`U0LEAD`) is an admin who calls `echo` too, whose approval keeps callers apart. `echo`
/// always asks, with nothing to answer; `send_email` asks, for one second.
fn config() -> Config {
    Config::from_toml(&config_text()).unwrap()
}

/// [`config`]'s text.
fn config_text() -> String {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    format!(
        r#"
[[auth.keys]]
name = "root"
role = "admin"
token_sha256 = "{admin}"

[[auth.keys]]
name = "ops"
role = "approver"
token_sha256 = "{ops}"

[[auth.keys]]
name = "agent"
role = "caller"
token_sha256 = "{agent}"

[[auth.keys]]
name = "lead"
role = "admin"
token_sha256 = "{lead}"

[[people]]
name = "ops"
slack_user = "U0OPS"

[[people]]
name = "corp:bob"
slack_user = "U0BOB"
decides = ["files__*"]

[[people]]
name = "agent"
slack_user = "U0AGENT"

[[people]]
name = "lead"
slack_user = "U0LEAD"

[tools.echo.approval]
reason = "'Echo ' + input.text + '?'"
separate_from_caller = true

[tools.send_email]
require_approval = true
approval_ttl_s = 1
"#,
        admin = hash(ADMIN),
        ops = hash(OPS),
        agent = hash(AGENT),
        lead = hash(LEAD),
    )
}

/// A stand-in for Slack: records every request it gets (a reply to a `response_url`, under
/// `/actions/`; a Web API call, under `/api/`), by path.
#[derive(Clone)]
struct Slack {
    url: String,
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Slack {
    async fn start() -> Slack {
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = got.clone();
        let app = axum::Router::new().fallback(axum::routing::any(
            move |uri: axum::http::Uri, body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    kept.lock().unwrap().push((uri.path().to_owned(), body));
                    axum::Json(json!({"ok": true, "channel": "D0DM", "ts": "1700000000.000100"}))
                }
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Slack { url, got }
    }

    /// The replies to interactions, in order.
    fn got(&self) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path.starts_with("/actions"))
            .map(|(_, body)| body.clone())
            .collect()
    }

    /// The bodies of the Web API's `method` it got, in order.
    fn called(&self, method: &str) -> Vec<Value> {
        let path = format!("/api/{method}");
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at == path)
            .map(|(_, body)| body.clone())
            .collect()
    }

    /// How many requests it got, of any kind, anywhere.
    fn requests(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    /// The `count`th reply's text, once it has arrived.
    async fn reply(&self, count: usize) -> String {
        let got = common::eventually(&format!("{count} replies"), async || {
            let got = self.got();
            (got.len() >= count).then_some(got)
        })
        .await;
        let reply = &got[count - 1];
        assert_eq!(reply["response_type"], "ephemeral", "{reply}");
        reply["text"].as_str().unwrap().to_owned()
    }
}

/// A server of the example tools with [`config`], its Slack app's Web API at `slack`.
async fn serve(at: &(impl Site + ?Sized), slack: &Slack) -> TestServer {
    let config = config();
    let people = Arc::new(config.people().unwrap());
    let door = SlackInteractions::new(people, "https://tools.example.com")
        .app(SECRET.as_bytes(), &format!("{}/api", slack.url))
        .unwrap();
    let tools = common::example_tools(at);
    TestServer::start_with(tools, at, |builder| {
        builder
            .api_keys(config.api_keys().unwrap())
            .dispatch_config(config.dispatch_config())
            .slack_interactions(door)
    })
    .await
}

/// `tool` called as `token`; its answer.
async fn call_as(api: &common::Api, token: &str, tool: &str, input: Value) -> Value {
    let (status, _, body) = common::send(
        api,
        Method::POST,
        &format!("/tools/{tool}/call"),
        Some(json!({ "input": input })),
        Some(token),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body
}

/// The record of `call_id`, as the admin reads it.
async fn call_record(api: &common::Api, call_id: &str) -> Value {
    let path = format!("/calls/{call_id}");
    let (status, _, body) = common::send(api, Method::GET, &path, None, Some(ADMIN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// `body` signed as Slack signs it, by Slack's SDK, with `secret` at `timestamp`.
fn sign(secret: &str, timestamp: &str, body: &str) -> String {
    let mut child = Command::new(ci_python())
        .arg(repo_root().join("tests/slack/sign.py"))
        .args([secret, timestamp])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "sign.py failed");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// The form Slack posts when Slack user `user` presses the button `action_id` of value
/// `token`, with its replies to go to `response_url`.
fn pressed(user: &str, action_id: &str, token: &str, response_url: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user, "username": user.to_lowercase(), "team_id": "T0TEAM"},
        "api_app_id": "A0APP",
        "team": {"id": "T0TEAM", "domain": "example"},
        "trigger_id": "1.2.3",
        "response_url": response_url,
        "actions": [{
            "type": "button",
            "action_id": action_id,
            "block_id": "toolgate_decide",
            "value": token,
            "action_ts": "1700000000.000100",
        }],
    });
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// Now, in Unix seconds, `offset` seconds away.
fn timestamp(offset: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (i64::try_from(now).unwrap() + offset).to_string()
}

/// Posts `body` to the door with these signature headers (none when `None`); the status and
/// the JSON body (`Null` when empty).
async fn post_signed(
    api: &common::Api,
    body: &str,
    headers: Option<(&str, &str)>,
) -> (StatusCode, Value) {
    let mut request = api
        .client
        .post(format!("{}/integrations/slack/interactions", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    if let Some((timestamp, signature)) = headers {
        request = request
            .header("x-slack-request-timestamp", timestamp)
            .header("x-slack-signature", signature);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let bytes = response.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Slack user `user` presses `action_id` on the approval `token`, signed now with the app's
/// secret; the door's status.
async fn press(
    api: &common::Api,
    slack: &Slack,
    user: &str,
    action_id: &str,
    token: &str,
) -> StatusCode {
    let body = pressed(
        user,
        action_id,
        token,
        &format!("{}/actions/T0/1/x", slack.url),
    );
    let at = timestamp(0);
    let signature = sign(SECRET, &at, &body);
    let (status, answer) = post_signed(api, &body, Some((&at, &signature))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    status
}

/// How many events of `kind` the call's history has.
fn events(record: &Value, kind: &str) -> usize {
    record["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["kind"] == kind)
        .count()
}

/// Who caused each event of `kind` in the call's history, in order.
fn actors<'a>(record: &'a Value, kind: &str) -> Vec<&'a str> {
    record["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["kind"] == kind)
        .map(|event| event["actor"].as_str().unwrap_or("(none)"))
        .collect()
}
