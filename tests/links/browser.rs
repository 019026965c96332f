//! A decision link followed in a real browser: headless Chromium (Debian's `chromium`,
//! installed by `.ci/test-deps`), driven by `tests/inbox_browser/link.mjs` through npm
//! `playwright-core`, launched as `tests/inbox_browser.rs` launches it; the links read from the
//! mails a real SMTP server received (aiosmtpd, `tests/notify/smtp_sink.py`).

use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Backend, Location, Site, TestServer, repo_root};
use crate::{APPROVER, CALLER, suspend};

/// The decision link in the mail of `call_id` to `to`, once it arrived in `dir`.
async fn link_in_mail(dir: &std::path::Path, to: &str, call_id: &str) -> String {
    crate::common::eventually(&format!("the mail of {call_id} to {to}"), async || {
        let entries = std::fs::read_dir(dir).ok()?;
        entries
            .map_while(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|text| serde_json::from_str::<Value>(&text).ok())
            .filter(|mail| mail["rcpt_tos"][0] == to)
            .filter_map(|mail| mail["text"].as_str().map(str::to_owned))
            .find(|text| text.contains(call_id))
            .and_then(|text| {
                let at = text.find("http")?;
                let link = text[at..].split_whitespace().next()?;
                link.contains("/inbox/link/").then(|| link.to_owned())
            })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_follows_the_link_of_a_mail_and_approves_in_a_real_browser() {
    let node_dir = repo_root().join(".ci/node");
    assert!(
        node_dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `bash .ci/test-deps`"
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "Debian's chromium is not installed: run `bash .ci/test-deps`"
    );
    let at = Location::new(Backend::Sqlite).await;
    let mail = at.data_dir().join("mail");
    let sink = crate::common::smtp::Sink::start(&mail, 0);
    let port = sink.port;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let file = format!(
        "[[auth.keys]]\nname = \"finance-ops\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n\
         [[auth.keys]]\nname = \"orchestrator\"\nrole = \"caller\"\ntoken_sha256 = \"{}\"\n\
         [[people]]\nname = \"finance-ops\"\nemail = \"finance@example.com\"\n\
         [[notify]]\nname = \"mail\"\nkind = \"email\"\nsmtp_url = \"smtp://127.0.0.1:{port}\"\n\
         starttls = \"off\"\nfrom = \"toolgate@example.com\"\n\
         [inbox]\npublic_url = \"{base}\"\n",
        hash(APPROVER),
        hash(CALLER),
    );
    let config = toolgate::config::Config::from_toml(&file).unwrap();
    let (keys, notify) = (config.api_keys().unwrap(), config.notify().unwrap());
    let inbox = config.inbox.options();
    let tools = crate::common::example_tools(&at);
    let server = TestServer::start_on(listener, tools, &at, |builder| {
        builder.api_keys(keys).notify(notify).inbox(inbox)
    })
    .await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship it?"})).await;
    let refund = json!({"order_id": "o-7", "amount_cents": 25000, "reason": "broken"});
    let write = suspend(&server, "issue_refund", refund).await;
    let answer_link = link_in_mail(&mail, "finance@example.com", &asked).await;
    let write_link = link_in_mail(&mail, "finance@example.com", &write).await;
    assert!(
        answer_link.starts_with(&format!("{base}/inbox/link/")),
        "{answer_link}"
    );
    let script = std::fs::read_to_string(repo_root().join("tests/inbox_browser/link.mjs")).unwrap();
    let mut command = Command::new("node");
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("LINK_BASE", &server.api.base)
        .env("LINK_APPROVER", APPROVER)
        .env("LINK_ANSWER", answer_link)
        .env("LINK_ANSWER_CALL", &asked)
        .env("LINK_WRITE", write_link)
        .env("LINK_WRITE_CALL", &write);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the browser script failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary ({e}): {stdout}"));
    assert_eq!(
        seen["steps"],
        json!(["answered and approved", "used", "write confirmed"]),
        "{seen}"
    );
    assert_eq!(seen["errors"], json!([]), "{seen}");
    server.stop().await;
}
