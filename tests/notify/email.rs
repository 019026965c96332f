//! What a mail says and whom it reaches, on both backends: one mail per person who may decide
//! (never the caller under four eyes, never a person without an address, never one who may not
//! decide the tool) and per fixed recipient; multipart text and HTML naming the tool, the
//! caller, the reason and the input, a hostile input escaped in the HTML; the link; the
//! deliveries an admin sees; the metrics; an escalation; retries of a server down or deferring
//! (`451`), none of a mailbox refused (`550`); nothing in the clear where STARTTLS is required.

use super::*;
use crate::common::{Backend, Location, TestServer};

/// A server on `backend` with the keys, the people, the policy and a mail channel to a sink
/// that is down (the channel named after its port, so each test counts its own metrics); the
/// location keeps the server's and the sink's files while it lives.
async fn with_mail_channel(backend: Backend, defer: u32) -> (Location, Sink, String, TestServer) {
    let location = Location::new(backend).await;
    let sink = Sink::down(&location.data_dir().join("mail"), defer);
    let channel = format!("mail-{}", sink.port);
    let file = format!(
        "{}{POLICY}{}",
        keys_and_people(),
        mail_channel(&channel, sink.port)
    );
    let server = serve(&location, &file).await;
    (location, sink, channel, server)
}

const HOSTILE: &str = "<script>alert(1)</script> & more";

async fn each_person_who_may_decide_gets_one_mail_saying_what_is_asked(backend: Backend) {
    let (_location, sink, channel, server) = with_mail_channel(backend, 0).await;
    let sink = sink.open();

    // bob (an admin) asks: under four eyes he is not told of his own call.
    let asked = ask_echo(&server.api, BOB, HOSTILE).await;
    let call_id = asked["call_id"].as_str().unwrap();
    let mails = sink.exactly(2).await;
    assert_eq!(
        recipients(&mails),
        ["alice@example.com", "ops@example.com"],
        "alice may decide, ops is always told; not bob (the caller), dave (no address), erin \
         (decides issue_refund only) or agent (a caller)"
    );
    let page = format!("https://tools.example.com/inbox/calls/{call_id}");
    for mail in &mails {
        // A person who may decide gets a signed decision link of their own; a fixed recipient
        // gets the call's page in the inbox, behind its sign-in.
        let link = match mail["rcpt_tos"][0].as_str() {
            Some("ops@example.com") => page.clone(),
            _ => "https://tools.example.com/inbox/link/".to_owned(),
        };
        assert_eq!(
            mail["parts"],
            serde_json::json!(["multipart/alternative", "text/plain", "text/html"]),
            "{mail}"
        );
        assert_eq!(mail["subject"], "Approval needed: echo");
        assert_eq!(mail["from"], "toolgate@example.com");
        let text = mail["text"].as_str().unwrap();
        let html = mail["html"].as_str().unwrap();
        for part in [text, html] {
            assert!(part.contains("echo"), "the tool: {part}");
            assert!(part.contains("bob"), "the caller: {part}");
            assert!(part.contains(&link), "the link: {part}");
            assert!(part.contains("Text"), "the input's field: {part}");
        }
        assert!(text.contains(&format!("Echo {HOSTILE}?")), "reason: {text}");
        assert!(text.contains(HOSTILE), "the input, as written: {text}");
        assert!(!html.contains("<script>"), "never markup: {html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more")
                || html.contains("&#60;script&#62;alert(1)&#60;/script&#62; &#38; more"),
            "escaped: {html}"
        );
    }

    // The admin sees both delivered, on this channel; the webhooks' list stays empty.
    let delivered = notifications(&server.api, "delivered", 2).await;
    let mut to: Vec<&str> = delivered
        .iter()
        .map(|d| d["recipient"].as_str().unwrap())
        .collect();
    to.sort();
    assert_eq!(to, ["alice@example.com", "ops@example.com"]);
    for delivery in &delivered {
        assert_eq!(delivery["channel"], channel.as_str());
        assert_eq!(delivery["type"], "call.suspended");
        assert_eq!(delivery["call_id"], call_id);
        assert_eq!(delivery["attempts"], 1);
        assert_eq!(delivery["last_status"], 250);
        assert!(delivery.get("webhook").is_none(), "{delivery}");
    }
    let ids: Vec<&str> = mails
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert!(
        delivered.iter().all(|d| ids
            .iter()
            .any(|id| id.contains(d["message_id"].as_str().unwrap()))),
        "each mail's Message-ID is its delivery's message id: {ids:?}"
    );
    let (status, hooks) = get_as(&server.api, BOB, "/webhooks/deliveries").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hooks["deliveries"], serde_json::json!([]), "{hooks}");
    let (status, _) = get_as(&server.api, ALICE, "/notifications/deliveries").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "admins only");

    // agent (a caller) asks: now bob is told too.
    ask_echo(&server.api, AGENT, "hello").await;
    let mails = sink.exactly(5).await;
    assert_eq!(
        recipients(&mails[2..]),
        ["alice@example.com", "bob@example.com", "ops@example.com"]
    );

    let metrics = server.api.metrics(BOB).await;
    let series =
        format!("toolgate_notifications_total{{channel=\"{channel}\",outcome=\"delivered\"}} 5");
    assert!(metrics.contains(&series), "{series} in {metrics}");
    server.stop().await;
}

async fn a_deferred_mail_is_retried_and_an_unreachable_server_waits(backend: Backend) {
    let (_location, sink, channel, server) = with_mail_channel(backend, 1).await;

    // No SMTP server yet: pending, retried, with why.
    let asked = ask_echo(&server.api, AGENT, "while down").await;
    let pending = common::eventually("a retried notification", async || {
        let (_, list) = get_as(&server.api, BOB, "/notifications/deliveries?status=pending").await;
        let got = list["deliveries"].as_array().unwrap().clone();
        let retried = got.len() == 3
            && got.iter().all(|d| {
                d["attempts"].as_u64().unwrap() >= 2 && d["last_error"].as_str().is_some()
            });
        retried.then_some(got)
    })
    .await;
    assert!(
        pending[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("SMTP server"),
        "{pending:?}"
    );
    assert!(pending.iter().all(|d| d["call_id"] == asked["call_id"]));

    // Up, deferring the first message once (451): each recipient gets one mail.
    let sink = sink.open();
    let mails = sink.exactly(3).await;
    assert_eq!(
        recipients(&mails),
        ["alice@example.com", "bob@example.com", "ops@example.com"]
    );
    notifications(&server.api, "delivered", 3).await;
    let metrics = server.api.metrics(BOB).await;
    let retried =
        format!("toolgate_notifications_total{{channel=\"{channel}\",outcome=\"retried\"}}");
    assert!(metrics.contains(&retried), "{retried} in {metrics}");
    server.stop().await;
}

async fn an_escalation_mails_the_people_it_reaches(backend: Backend) {
    let location = Location::new(backend).await;
    let sink = Sink::start(&location.data_dir().join("mail"), 0);
    let port = sink.port;
    let file = format!(
        "{}[tools.echo.approval]\nescalate_after_s = 1\nescalate_to = [\"escalations\"]\n\
         [webhook_delivery]\ninitial_backoff_ms = 100\n{}",
        keys_and_people(),
        mail_channel(&format!("mail-{port}"), port)
    );
    let server = serve(&location, &file).await;
    ask_echo(&server.api, AGENT, "escalate me").await;
    let mails = sink.exactly(7).await;
    let (asked, escalated): (Vec<Value>, Vec<Value>) = mails
        .into_iter()
        .partition(|m| m["subject"] == "Approval needed: echo");
    assert_eq!(
        recipients(&asked),
        ["alice@example.com", "bob@example.com", "ops@example.com"],
        "manager decides nothing of echo until it is escalated"
    );
    assert!(
        escalated
            .iter()
            .all(|m| m["subject"] == "Escalated approval: echo"),
        "{escalated:?}"
    );
    assert_eq!(
        recipients(&escalated),
        [
            "alice@example.com",
            "bob@example.com",
            "manager@example.com",
            "ops@example.com"
        ],
        "escalate_to reaches manager (and whoever decides every tool)"
    );
    let text = escalated[0]["text"].as_str().unwrap();
    assert!(text.contains("escalated"), "{text}");
    // manager's link opens the decision, as the escalation lets manager decide it.
    let managers = escalated
        .iter()
        .find(|m| m["rcpt_tos"][0] == "manager@example.com")
        .unwrap();
    let text = managers["text"].as_str().unwrap();
    let at = text.find("/inbox/link/").expect("a decision link");
    let path: String = text[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let page = crate::common::browser::Browser::new(&server)
        .get(&path)
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains(&format!("action=\"{path}/approve\"")),
        "{}",
        page.body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_required_sends_nothing_to_a_server_without_it() {
    let location = Location::new(Backend::Sqlite).await;
    let sink = Sink::start(&location.data_dir().join("mail"), 0);
    let port = sink.port;
    // The default: STARTTLS required; aiosmtpd offers none.
    let channel = mail_channel("tls", port).replace("starttls = \"off\"\n", "");
    let file = format!("{}{POLICY}{channel}", keys_and_people());
    let server = serve(&location, &file).await;
    ask_echo(&server.api, AGENT, "in the clear?").await;
    let pending = common::eventually("the refused attempts", async || {
        let (_, list) = get_as(&server.api, BOB, "/notifications/deliveries?status=pending").await;
        let got = list["deliveries"].as_array().unwrap().clone();
        (got.len() == 3 && got.iter().all(|d| d["last_error"].is_string())).then_some(got)
    })
    .await;
    assert!(sink.messages().is_empty(), "nothing sent in the clear");
    assert!(
        pending.iter().all(|d| d["status"] == "pending"),
        "{pending:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mailbox_refused_for_good_is_not_tried_again() {
    let location = Location::new(Backend::Sqlite).await;
    let sink = Sink::start(&location.data_dir().join("mail"), 0);
    let port = sink.port;
    let channel =
        mail_channel("bounce", port).replace("\"ops@example.com\"", "\"bounce@example.com\"");
    let file = format!("{}{POLICY}{channel}", keys_and_people());
    let server = serve(&location, &file).await;
    ask_echo(&server.api, AGENT, "bounce").await;
    let failed = notifications(&server.api, "failed", 1).await;
    assert_eq!(failed[0]["recipient"], "bounce@example.com");
    assert_eq!(failed[0]["last_status"], 550);
    assert_eq!(failed[0]["attempts"], 1, "a 5xx is not retried: {failed:?}");
    let mails = sink.exactly(2).await;
    assert_eq!(recipients(&mails), ["alice@example.com", "bob@example.com"]);
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_escalation_mails_the_people_it_reaches;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_person_who_may_decide_gets_one_mail_saying_what_is_asked;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deferred_mail_is_retried_and_an_unreachable_server_waits;
}
