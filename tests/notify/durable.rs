//! Mail that survives: a `kill -9` between the suspension's commit and its delivery still
//! mails every recipient once after a restart; two replicas on one PostgreSQL mail each
//! recipient once, not twice; and the start warns of a channel that reaches nobody.

use super::*;
use crate::common::pg::TestDb;
use crate::common::{Backend, Location};

/// The binary's whole config: keys, people, the policy, one mail channel to `port`.
fn file(port: u16) -> String {
    format!(
        "{}{POLICY}{}",
        keys_and_people(),
        mail_channel("mail", port)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_before_the_mail_still_mails_each_recipient_once() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let location = Location::new(backend).await;
        let sink = Sink::down(&location.data_dir().join("mail"), 0);
        let port = sink.port;
        let first = binary(&location, &file(port));
        // Committed, answered; the SMTP server is down: the mail cannot have gone.
        let asked = ask_echo(&first.api, AGENT, "survive").await;
        first.kill();

        let sink = sink.open();
        let second = binary(&location, &file(port));
        let mails = sink.exactly(3).await;
        assert_eq!(
            recipients(&mails),
            ["alice@example.com", "bob@example.com", "ops@example.com"],
            "{backend:?}"
        );
        let delivered = notifications(&second.api, "delivered", 3).await;
        assert!(
            delivered.iter().all(|d| d["call_id"] == asked["call_id"]),
            "{delivered:?}"
        );
        second.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_mail_each_recipient_once() {
    let db = TestDb::create().await;
    let dirs = [common::temp_dir(), common::temp_dir()];
    let sink = Sink::start(&dirs[0].path().join("mail"), 0);
    let port = sink.port;
    let replicas: Vec<Binary> = dirs
        .iter()
        .map(|dir| {
            let path = dir.path().join("toolgate.toml");
            std::fs::write(&path, file(port)).unwrap();
            Binary::start_with(
                dir.path(),
                &[
                    "--config",
                    path.to_str().unwrap(),
                    "--database-url",
                    &db.url,
                ],
                &common::pg::binary_env()
                    .iter()
                    .map(|(k, v)| (*k, v.as_str()))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    // Suspensions made on either replica; both outboxes follow the one feed.
    for (i, replica) in replicas.iter().enumerate() {
        ask_echo(&replica.api, AGENT, &format!("replica {i}")).await;
    }
    let mails = sink.exactly(6).await;
    assert_eq!(
        recipients(&mails),
        [
            "alice@example.com",
            "alice@example.com",
            "bob@example.com",
            "bob@example.com",
            "ops@example.com",
            "ops@example.com"
        ],
        "one mail per recipient per suspension"
    );
    let mut ids: Vec<&str> = mails
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 6, "six messages, none twice");
    for replica in replicas {
        replica.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_warns_of_a_channel_that_reaches_nobody() {
    let dir = common::temp_dir();
    let path = dir.path().join("toolgate.toml");
    // Nobody has a Slack user, and the channel posts to no channel of its own.
    std::fs::write(
        &path,
        "[[people]]\nname = \"alice\"\nemail = \"alice@example.com\"\n\
         [[notify]]\nname = \"lonely\"\nkind = \"slack\"\nbot_token_env = \"SLACK_TEST_TOKEN\"\n",
    )
    .unwrap();
    let server = Binary::start_with(
        dir.path(),
        &["--config", path.to_str().unwrap()],
        &[("SLACK_TEST_TOKEN", SLACK_TOKEN)],
    );
    let warned = common::eventually("the warning", async || {
        server
            .log()
            .into_iter()
            .find(|line| line.contains("reaches nobody"))
    })
    .await;
    assert!(warned.contains("lonely"), "{warned}");
    server.kill();
}
