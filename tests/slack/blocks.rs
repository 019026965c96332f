//! The messages' Block Kit, judged by Slack's SDK (`check_blocks.py`: `Block.parse_all`, each
//! block's `validate_json()`), with hostile text from a caller everywhere a caller writes: it
//! reaches Slack escaped, no mention or link survives, and every text stays under its limit.

use serde_json::Value;
use toolgate::notify::message::{Asked, Decided, How, InputLine, MessageFacts};
use toolgate::notify::slack::blocks;
use toolgate::store::Timestamp;

use super::common;

const HOSTILE: &str = "<!channel> <https://evil|click> *bold* &amp;";

fn facts(one_click: bool) -> MessageFacts {
    MessageFacts {
        asked: Asked::Suspended,
        tool: "issue_refund".into(),
        call_id: "call_01HX".into(),
        token: "sus_token_0123456789".into(),
        caller: Some("corp:mallory".into()),
        caller_display: Some(format!("Mallory {HOSTILE}")),
        reason: format!(
            "Refund please {HOSTILE} ```code``` <@U0ADMIN> {}",
            "x".repeat(5000)
        ),
        input: (0..60)
            .map(|n| InputLine {
                depth: n % 3,
                label: format!("Field {n} {HOSTILE}"),
                value: (n % 4 != 0).then(|| format!("{HOSTILE} ``` {}", "v".repeat(250))),
            })
            .collect(),
        input_truncated: true,
        one_click,
        inbox_url: "https://tools.example.com/inbox/calls/call_01HX".into(),
        link: "https://tools.example.com/inbox/link/signed.abc".into(),
        expires_at: Some(Timestamp(1_765_000_000_000)),
    }
}

/// Runs the SDK's check on `bodies`; its summary of each (buttons, texts).
pub(super) fn judged(bodies: &[Value]) -> Vec<Value> {
    common::judged_by_slack_sdk(bodies)
}

fn action_ids(summary: &Value) -> Vec<&str> {
    summary["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|button| button["action_id"].as_str().unwrap())
        .collect()
}

fn all_text(summary: &Value) -> String {
    summary["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|text| text.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn messages_pass_slacks_models_with_hostile_text_escaped() {
    let decided = Decided {
        by: Some("corp:alice".into()),
        by_display: Some(format!("Alice {HOSTILE}")),
        how: How::Rejected {
            option: Some(format!("fraud {HOSTILE}")),
        },
        at: Timestamp(1_765_000_100_000),
    };
    let bodies = [
        blocks::message(&facts(true)),
        blocks::message(&facts(false)),
        blocks::decided(&facts(true), &decided),
    ];
    let summaries = judged(&bodies);

    // One click: Approve and Reject carry the token; the inbox is a link.
    let one = &summaries[0];
    assert_eq!(
        action_ids(one),
        ["toolgate_approve", "toolgate_reject", "toolgate_open"]
    );
    let buttons = one["buttons"].as_array().unwrap();
    assert_eq!(buttons[0]["value"], "sus_token_0123456789");
    assert_eq!(buttons[1]["value"], "sus_token_0123456789");
    assert_eq!(buttons[1]["confirm"], true, "Reject asks to confirm");
    assert_eq!(
        buttons[2]["url"],
        "https://tools.example.com/inbox/calls/call_01HX"
    );

    // Not in one click: no Approve; the decision link instead, saying why.
    let two = &summaries[1];
    assert_eq!(action_ids(two), ["toolgate_reject", "toolgate_open"]);
    assert_eq!(
        two["buttons"][1]["url"],
        "https://tools.example.com/inbox/link/signed.abc"
    );
    assert!(all_text(two).contains("cannot be approved from Slack in one click"));

    // Decided: no buttons; who, how and when.
    let three = &summaries[2];
    assert!(action_ids(three).is_empty());
    let text = all_text(three);
    assert!(text.contains("*Rejected* by Alice"), "{text}");
    assert!(text.contains("(`corp:alice`)"), "{text}");
    assert!(text.contains("<!date^1765000100^"), "{text}");

    for summary in &summaries {
        let text = all_text(summary);
        assert!(!text.contains("<!channel>"), "{text}");
        assert!(!text.contains("<https://evil"), "{text}");
        assert!(!text.contains("<@U0ADMIN>"), "{text}");
        assert!(
            text.contains("&lt;!channel&gt;"),
            "escaped, still readable: {text}"
        );
        assert!(text.contains("&lt;https://evil|click&gt;"), "{text}");
        assert!(text.contains("&amp;amp;"), "{text}");
        // Outside code blocks (where marks are literal anyway), no mark pairs.
        for one in summary["texts"].as_array().unwrap() {
            let one = one.as_str().unwrap();
            if !one.contains("```") {
                assert!(!one.contains("*bold*"), "formatting kept: {one}");
            }
        }
        assert!(text.contains("*\u{200b}bold*\u{200b}"), "{text}");
    }
    // The mrkdwn of the first message: every `<` is one of ours (a date).
    let sections: Vec<&str> = bodies[0]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"]["text"].as_str())
        .collect();
    for text in sections {
        assert!(text.chars().count() <= 3000);
        assert_eq!(
            text.matches('<').count(),
            text.matches("<!date^").count(),
            "{text}"
        );
    }
}

#[test]
fn an_escalated_call_of_auth_off_still_reads() {
    let mut facts = facts(true);
    facts.asked = Asked::Escalated;
    facts.caller = None;
    facts.caller_display = None;
    facts.input.clear();
    facts.reason = String::new();
    facts.expires_at = None;
    let decided = Decided {
        by: None,
        by_display: None,
        how: How::Expired,
        at: Timestamp(1_765_000_100_000),
    };
    let summaries = judged(&[blocks::message(&facts), blocks::decided(&facts, &decided)]);
    let text = all_text(&summaries[0]);
    assert!(text.contains("Still waiting for a decision"), "{text}");
    assert!(text.contains("Someone (auth is off)"), "{text}");
    assert!(all_text(&summaries[1]).contains("nobody decided in time"));
}
