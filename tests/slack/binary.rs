//! The binary: a `[[notify]]` Slack channel's signing secret (from the variable its
//! `signing_secret_env` names), the `[[people]]` and `[inbox] public_url` reach the door; and
//! the message the channel posts passes Slack's models.

use reqwest::StatusCode;
use serde_json::json;

use super::common::{Backend, Binary, Location, Site};
use super::{
    AGENT, SECRET, Slack, actors, call_as, call_record, config_text, post_signed, press, pressed,
    sign, timestamp,
};

#[tokio::test]
async fn the_binary_takes_presses_signed_with_its_slack_channels_secret() {
    let at = Location::new(Backend::Sqlite).await;
    let slack = Slack::start().await;
    let config = format!(
        "{}\n[inbox]\npublic_url = \"https://tools.example.com\"\n\n[[notify]]\n\
         name = \"ops-slack\"\nkind = \"slack\"\nbot_token_env = \"TEST_SLACK_BOT\"\n\
         signing_secret_env = \"TEST_SLACK_SECRET\"\napi_url = \"{}/api\"\n",
        config_text(),
        slack.url
    );
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    let server = Binary::start_with(
        &at,
        &["--config", path.to_str().unwrap()],
        &[
            ("TEST_SLACK_BOT", "xoxb-test"),
            ("TEST_SLACK_SECRET", SECRET),
        ],
    );
    let api = &server.api;

    let asked = call_as(api, AGENT, "ask_human", json!({"question": "Ship?"})).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    // The channel posted its message, which Slack's models take, its Reject naming the token.
    // Each recipient's message is sent on its own, in no set order: the one to U0OPS is read,
    // and it is the only one to U0OPS.
    let posted: Vec<_> = super::common::eventually("a message posted to U0OPS", async || {
        let to_ops: Vec<_> = slack
            .called("chat.postMessage")
            .into_iter()
            .filter(|message| message["channel"] == "U0OPS")
            .collect();
        Some(to_ops).filter(|to_ops| !to_ops.is_empty())
    })
    .await;
    assert_eq!(posted.len(), 1, "one message to U0OPS: {posted:?}");
    let judged = super::blocks::judged(&posted[..1]);
    let reject = judged[0]["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|button| button["action_id"] == "toolgate_reject")
        .cloned()
        .unwrap();
    assert_eq!(reject["value"], token);
    press(api, &slack, "U0OPS", "toolgate_approve", token).await;
    let said = slack.reply(1).await;
    // The link is under `[inbox] public_url`.
    assert!(
        said.contains("<https://tools.example.com/inbox/calls/call_"),
        "{said}"
    );

    let asked = call_as(api, AGENT, "echo", json!({"text": "go"})).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    let body = pressed(
        "U0OPS",
        "toolgate_approve",
        token,
        &format!("{}/actions/2", slack.url),
    );
    let now = timestamp(0);
    let forged = sign("another-apps-secret", &now, &body);
    let (status, _) = post_signed(api, &body, Some((&now, &forged))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = post_signed(api, &body, Some((&now, &sign(SECRET, &now, &body)))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(slack.reply(2).await.contains("You approved"));
    let record = call_record(api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(actors(&record, "approved"), ["ops"]);
}
