//! Notification channels (`[[notify]]`): approvers told by mail, against a real SMTP server
//! (aiosmtpd, from the suite's virtualenv, which parses each message with Python's own `email`
//! package), and in Slack, against a stand-in for its Web API. Who is told, what a message
//! says (escaped), the deliveries an admin sees, retries, metrics, a `kill -9` between the
//! suspension and its mail, and two replicas sending one mail per recipient.
//!
//! By concern: `email.rs` (what a mail says and whom it reaches, on both backends), `durable.rs`
//! (an SMTP server down, a `kill -9`, two replicas), `slack.rs` (posts and their updates).

#[path = "../common/mod.rs"]
mod common;

mod durable;
mod email;
mod slack;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

pub use common::smtp::{Sink, messages_in};
use common::{Api, Binary, Location, Site, TestServer};
use toolgate::config::Config;

/// The Slack bot token the tests' channels read from `SLACK_TEST_TOKEN`.
pub const SLACK_TOKEN: &str = "xoxb-test-0123456789";

/// The server in this process on `location`, configured by `file`; a channel's secrets read
/// from a test environment of `SLACK_TEST_TOKEN` only.
pub async fn serve(location: &Location, file: &str) -> TestServer {
    let config = Config::from_toml(file).unwrap();
    let keys = config.api_keys().unwrap();
    let dispatch = config.dispatch_config();
    let env = |name: &str| (name == "SLACK_TEST_TOKEN").then(|| SLACK_TOKEN.to_owned());
    let notify = config.notify_with(env, false).unwrap();
    let inbox = config.inbox.options();
    let tools = common::example_tools(location);
    TestServer::start_with(tools, location, |b| {
        b.api_keys(keys)
            .dispatch_config(dispatch)
            .notify(notify)
            .inbox(inbox)
    })
    .await
}

/// The API keys every test configures: a caller, two approvers, an admin, and an approver of
/// `issue_refund` only.
pub const AGENT: &str = "agent-token-0123456789abcdef";
pub const ALICE: &str = "alice-token-0123456789abcdef";
pub const BOB: &str = "bob-token-0123456789abcdef01";
pub const DAVE: &str = "dave-token-0123456789abcdef0";
pub const ERIN: &str = "erin-token-0123456789abcdef0";
pub const MANAGER: &str = "manager-token-0123456789abc";

/// The keys and people: alice (approver) and bob (admin) have mail and Slack; dave (approver)
/// has neither; erin decides `issue_refund` only; agent is a caller with both; manager decides
/// only what is escalated to `escalations`, with mail.
pub fn keys_and_people() -> String {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let mut file = String::new();
    for (name, role, token, decides) in [
        ("agent", "caller", AGENT, None),
        ("alice", "approver", ALICE, None),
        ("bob", "admin", BOB, None),
        ("dave", "approver", DAVE, None),
        ("erin", "approver", ERIN, Some("issue_refund")),
        ("manager", "approver", MANAGER, Some("escalations")),
    ] {
        file += &format!(
            "[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{}\"\n",
            hash(token)
        );
        if let Some(decides) = decides {
            file += &format!("decides = [\"{decides}\"]\n");
        }
    }
    for (name, email, slack) in [
        ("alice", Some("alice@example.com"), Some("U0ALICE")),
        ("bob", Some("bob@example.com"), Some("U0BOB")),
        ("dave", None, None),
        ("erin", Some("erin@example.com"), Some("U0ERIN")),
        ("agent", Some("agent@example.com"), Some("U0AGENT")),
        ("manager", Some("manager@example.com"), None),
    ] {
        file += &format!("[[people]]\nname = \"{name}\"\n");
        if let Some(email) = email {
            file += &format!("email = \"{email}\"\n");
        }
        if let Some(user) = slack {
            file += &format!("slack_user = \"{user}\"\n");
        }
    }
    file
}

/// `echo` waits for one approver, never its caller; fast retries, many of them (a server down
/// for a while is still pending when the test looks); links under a public URL.
pub const POLICY: &str = "[tools.echo.approval]\nseparate_from_caller = true\n\
     reason = \"'Echo ' + input.text + '?'\"\n\
     [webhook_delivery]\ninitial_backoff_ms = 100\nmax_backoff_ms = 300\ntimeout_ms = 5000\n\
     max_attempts = 100\n\
     [inbox]\npublic_url = \"https://tools.example.com\"\n";

/// An email channel named `name` to the SMTP server on `port`, plain text (aiosmtpd offers no
/// TLS), with `ops@example.com` always told.
pub fn mail_channel(name: &str, port: u16) -> String {
    format!(
        "[[notify]]\nname = \"{name}\"\nkind = \"email\"\nsmtp_url = \"smtp://127.0.0.1:{port}\"\n\
         starttls = \"off\"\nfrom = \"toolgate@example.com\"\nto = [\"ops@example.com\"]\n"
    )
}

/// The recipients of `messages`, sorted.
pub fn recipients(messages: &[Value]) -> Vec<String> {
    let mut to: Vec<String> = messages
        .iter()
        .flat_map(|m| m["rcpt_tos"].as_array().unwrap().clone())
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    to.sort();
    to
}

/// `GET path` as `token`.
pub async fn get_as(api: &Api, token: &str, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = common::send(api, reqwest::Method::GET, path, None, Some(token)).await;
    (status, body)
}

/// Calls `echo` with `text` as `token`: it waits for an approval.
pub async fn ask_echo(api: &Api, token: &str, text: &str) -> Value {
    let (status, _, body) = common::send(
        api,
        reqwest::Method::POST,
        "/tools/echo/call",
        Some(serde_json::json!({ "input": { "text": text } })),
        Some(token),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body
}

/// The notifications an admin sees, once `count` are in `status`.
pub async fn notifications(api: &Api, status: &str, count: usize) -> Vec<Value> {
    common::eventually(&format!("{count} notifications {status}"), async || {
        let (code, list) = get_as(
            api,
            BOB,
            &format!("/notifications/deliveries?status={status}"),
        )
        .await;
        assert_eq!(code, StatusCode::OK, "{list}");
        let got = list["deliveries"].as_array().unwrap().clone();
        (got.len() >= count).then_some(got)
    })
    .await
}

/// The binary on `at` with the config file `config`.
pub fn binary(at: &(impl Site + ?Sized), config: &str) -> Binary {
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    Binary::start_with(at, &["--config", path.to_str().unwrap()], &[])
}
