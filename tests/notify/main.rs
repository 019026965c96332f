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

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

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

/// The SMTP server of `smtp_sink.py`, writing each message it accepts as a JSON file. It binds
/// its own port, so no other test can take the port between a choice and a bind.
pub struct Sink {
    child: Child,
    lines: std::io::BufReader<std::process::ChildStdout>,
    dir: PathBuf,
    /// The port it holds: refusing connections until [`Sink::open`], then listening.
    pub port: u16,
}

impl Sink {
    /// Listens on a port of its own, writing to `dir`; answers the first `defer` messages 451.
    pub fn start(dir: &Path, defer: u32) -> Sink {
        let sink = Sink::down(dir, defer);
        sink.open()
    }

    /// Holds a port of its own but refuses connections there, as a server that is down, until
    /// [`Sink::open`].
    pub fn down(dir: &Path, defer: u32) -> Sink {
        std::fs::create_dir_all(dir).unwrap();
        let script = common::repo_root().join("tests/notify/smtp_sink.py");
        let mut child = Command::new(common::ci_python())
            .arg(script)
            .arg(dir)
            .arg(defer.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the SMTP sink starts");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
        let line = read_line(&mut lines);
        let port = line
            .strip_prefix("port ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the SMTP sink names its port: {line:?}"));
        Sink {
            child,
            lines,
            dir: dir.to_owned(),
            port,
        }
    }

    /// Starts listening on the port held.
    pub fn open(mut self) -> Sink {
        let stdin = self.child.stdin.as_mut().unwrap();
        std::io::Write::write_all(stdin, b"open\n").unwrap();
        std::io::Write::flush(stdin).unwrap();
        assert_eq!(read_line(&mut self.lines), "ready", "the SMTP sink listens");
        self
    }

    /// Every message accepted so far, oldest first.
    pub fn messages(&self) -> Vec<Value> {
        messages_in(&self.dir)
    }

    /// Waits until `count` messages are accepted; then a while longer, and checks no more came.
    pub async fn exactly(&self, count: usize) -> Vec<Value> {
        common::eventually(&format!("{count} mails"), async || {
            let got = self.messages();
            (got.len() >= count).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let got = self.messages();
        assert_eq!(got.len(), count, "no more mail than that: {got:#?}");
        got
    }
}

fn read_line(lines: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    line.trim().to_owned()
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The messages written in `dir`, oldest first.
pub fn messages_in(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<PathBuf> = entries
        .map_while(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
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
