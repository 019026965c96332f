//! What a person reads before and after deciding: the input as a readable list, what approving
//! a `write` does and its confirmation step (two real posts, no script), the banner and the
//! way on to the next approval, the history in sentences, one wording for expiry, and text
//! from a tool (its description, its schema's help) with inline code, escaped.

use reqwest::StatusCode;
use serde_json::json;
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet};

use crate::common::{self, TestServer};
use crate::{APPROVER, Page, call_record, keys, signed_in, suspend};

/// The value of the hidden field `name` in `page`.
fn hidden(page: &Page, name: &str) -> Option<String> {
    let at = page
        .body
        .find(&format!("type=\"hidden\" name=\"{name}\" value=\""))?;
    let rest = &page.body[at..];
    let rest = &rest[rest.find("value=\"")? + "value=\"".len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

#[tokio::test]
async fn approving_a_write_is_confirmed_on_a_second_post_and_then_says_what_it_did() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    // The oldest waiting approval, for the way on after the decision.
    let older = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-17", "amount_cents": 1_999_900, "reason": "damaged"}),
    )
    .await;
    let path = format!("/inbox/calls/{refund}");
    let page = person.get(&path).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;
    for shown in [
        // What is asked, in dollars.
        "A refund of $19,999.00 for order o-17 (damaged) is above the $100.00 approval \
         threshold.",
        // The input as a readable list: labels from the field names, the schema's
        // descriptions beside them, digits grouped.
        "<dt>Amount cents<span class=\"help\">How much to refund, in cents.</span></dt><dd>1,999,900</dd>",
        "<dt>Order id<span class=\"help\">The order to refund.</span></dt><dd>o-17</dd>",
        // The raw JSON, one click away.
        "<summary>The input as JSON</summary>",
        "&#34;amount_cents&#34;: 1999900",
        // What approving does.
        "Approving runs <strong>issue_refund</strong> now: Refunds an order.",
        "This is a write: it changes something outside toolgate, and toolgate does not undo it. \
         You confirm on the next step.",
        // The one wording for expiry.
        "<span class=\"expiry\">Never expires</span>",
        // Complete externally: folded away, saying when to use it.
        "<details class=\"card decide secondary\" id=\"complete\">",
        "Use this only when the work was already done outside toolgate and you have its receipt",
    ] {
        assert!(body.contains(shown), "{shown:?} not in {body}");
    }
    // Its receipt's status allows one value: chosen already, no "(none)".
    let status_select = &body[body.find("name=\"v/status\"").unwrap()..];
    let status_select = &status_select[..status_select.find("</select>").unwrap()];
    assert!(
        status_select.contains("<option value=\"0\" selected>issued</option>"),
        "{status_select}"
    );
    assert!(!status_select.contains("(none)"), "{status_select}");
    // An unsigned amount does not say "At least 0"; the receipt has no other bound.
    assert!(!body.contains("At least 0"), "{body}");

    // The first post: the confirmation, which approves nothing.
    let csrf = page.csrf();
    let approve = format!("{path}/approve");
    let first = person
        .post(
            &approve,
            &[("csrf", &csrf), ("v/note", "Checked with the customer.")],
        )
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert!(
        first
            .body
            .contains("<h2 id=\"confirm-title\">Confirm: approve and run issue_refund?</h2>"),
        "{}",
        first.body
    );
    assert!(first.body.contains("<dt>Note<span class=\"help\">A note kept with the approval.</span></dt><dd>Checked with the customer.</dd>"));
    assert_eq!(hidden(&first, "csrf").as_deref(), Some(csrf.as_str()));
    assert_eq!(
        hidden(&first, "v/note").as_deref(),
        Some("Checked with the customer.")
    );
    assert!(
        first
            .body
            .contains("<button type=\"submit\" name=\"confirm\" value=\"1\" class=\"primary\">Approve and run issue_refund</button>")
    );
    assert!(
        !first.body.contains("id=\"approve-form\""),
        "the form is replaced"
    );
    let call = call_record(&server, &refund).await;
    assert_eq!(call["status"], "suspended", "nothing approved yet");
    assert_eq!(call["attempts"], 1);

    // "Change the answer": the form again, with the answer typed; still nothing approved.
    let change = person
        .post(
            &approve,
            &[
                ("csrf", &csrf),
                ("v/note", "Checked with the customer."),
                ("change", "1"),
            ],
        )
        .await;
    assert_eq!(change.status, StatusCode::OK);
    assert!(change.body.contains("id=\"approve-form\""));
    assert!(
        change
            .body
            .contains(">Checked with the customer.</textarea>"),
        "{}",
        change.body
    );
    assert_eq!(call_record(&server, &refund).await["status"], "suspended");

    // The second post, with the confirmation: approved, and the refund issued.
    let second = person
        .post(
            &approve,
            &[
                ("csrf", &csrf),
                ("v/note", "Checked with the customer."),
                ("confirm", "1"),
            ],
        )
        .await;
    assert_eq!(second.status, StatusCode::SEE_OTHER, "{}", second.body);
    assert_eq!(second.header("location"), format!("{path}?done=approved"));
    let call = call_record(&server, &refund).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(call["attempts"], 2);
    assert_eq!(call["output"]["amount_cents"], 1_999_900);
    assert_eq!(
        crate::actor_of(&call, "approved").as_deref(),
        Some("finance-ops")
    );

    // The page it leads to: what was done, the way on, the history in sentences.
    let after = person.get(second.header("location")).await;
    assert_eq!(after.status, StatusCode::OK);
    let body = &after.body;
    assert!(
        body.contains("<p class=\"banner-text\">Approved. issue_refund ran and completed.</p>"),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "Next waiting: <a href=\"/inbox/calls/{older}\" id=\"next-approval\">"
        )),
        "the oldest waiting approval: {body}"
    );
    for sentence in [
        "Created by orchestrator.",
        "Suspended: A refund of $19,999.00 for order o-17 (damaged) is above the $100.00 \
         approval threshold.",
        "Approved by finance-ops: Checked with the customer.",
        "Ran again with the approval and completed.",
    ] {
        assert!(
            body.contains(&format!("<span class=\"what\">{sentence}</span>")),
            "{sentence:?} not in {body}"
        );
    }
    assert!(!body.contains("\"attempts\""), "no raw JSON in the history");
    // Times in UTC, for the script to show in local time, with UTC on hover.
    let time = &body[body.find("<span class=\"when\"><time datetime=\"").unwrap()..];
    let time = &time[..time.find("</time>").unwrap()];
    assert!(time.contains("Z\" title=\""), "{time}");
    assert!(time.ends_with(" UTC"), "{time}");
    // The output as a readable list too.
    assert!(body.contains("<dt>Amount cents<span class=\"help\">The amount refunded, in cents.</span></dt><dd>1,999,900</dd>"), "{body}");

    // The last waiting one decided (a read: one step), the banner leads back to the queue.
    let page = person.get(&format!("/inbox/calls/{older}")).await;
    let read = person
        .post(
            &format!("/inbox/calls/{older}/approve"),
            &[("csrf", &page.csrf()), ("v/answer", "Yes.")],
        )
        .await;
    assert_eq!(
        read.status,
        StatusCode::SEE_OTHER,
        "a read approves at once"
    );
    assert_eq!(call_record(&server, &older).await["status"], "completed");
    let after = person.get(read.header("location")).await;
    assert!(
        after
            .body
            .contains("Approved. ask_human ran and completed.")
    );
    assert!(
        after.body.contains(
            "Nothing else waits for a person. <a href=\"/inbox\" id=\"next-approval\">Back to the queue</a>"
        ),
        "{}",
        after.body
    );
    // A flag that the history does not bear out shows no banner.
    let claimed = person.get(&format!("{path}?done=rejected")).await;
    assert_eq!(claimed.status, StatusCode::OK);
    assert!(
        !claimed.body.contains("class=\"banner\""),
        "{}",
        claimed.body
    );
    server.stop().await;
}

#[tokio::test]
async fn a_rejection_leads_on_with_a_banner_and_reads_as_a_sentence() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Deploy?"})).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    let rejected = person
        .post(
            &format!("/inbox/calls/{asked}/reject"),
            &[("csrf", &page.csrf()), ("reason", "Not on a Friday.")],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER);
    assert_eq!(
        rejected.header("location"),
        format!("/inbox/calls/{asked}?done=rejected")
    );
    let after = person.get(rejected.header("location")).await;
    assert!(
        after
            .body
            .contains("Rejected. ask_human did not run; the caller reads why."),
        "{}",
        after.body
    );
    assert!(
        after
            .body
            .contains("<span class=\"what\">Rejected by finance-ops: Not on a Friday.</span>")
    );
    assert_eq!(call_record(&server, &asked).await["status"], "rejected");
    server.stop().await;
}

#[tokio::test]
async fn the_queue_and_the_call_page_word_expiry_alike() {
    let dir = common::temp_dir();
    let mut dispatch = toolgate::dispatch::DispatchConfig::default();
    dispatch.tools.insert(
        "ask_human".into(),
        toolgate::dispatch::ToolSettings {
            approval_ttl: Some(std::time::Duration::from_secs(7_200)),
            ..Default::default()
        },
    );
    let server = TestServer::start_with(common::example_tools(dir.path()), dir.path(), |b| {
        b.api_keys(keys()).dispatch_config(dispatch)
    })
    .await;
    let expiring = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let lasting = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-1", "amount_cents": 50_000, "reason": "late"}),
    )
    .await;
    let mut person = crate::Person::new(&server);
    person.sign_in(APPROVER).await;
    let queue = person.get("/inbox").await;
    let expiry = |page: &Page, nth: usize| -> String {
        let from = page.body.split("class=\"expiry\">").nth(nth).unwrap();
        from[..from.find("</").unwrap()].to_owned()
    };
    // The queue's first item (the oldest) expires; the second never does.
    assert!(
        expiry(&queue, 1).starts_with("Expires in 1 h ("),
        "{}",
        queue.body
    );
    assert_eq!(expiry(&queue, 2), "Never expires");
    assert!(!queue.body.contains("no expiry"));
    let page = person.get(&format!("/inbox/calls/{expiring}")).await;
    assert!(
        expiry(&page, 1).starts_with("Expires in 1 h ("),
        "{}",
        page.body
    );
    let page = person.get(&format!("/inbox/calls/{lasting}")).await;
    assert_eq!(expiry(&page, 1), "Never expires");
    assert!(!page.body.contains("never expires"));
    server.stop().await;
}

/// Runs `<script>alert(1)</script>` (a description that tries to inject markup through inline
/// code).
#[derive(Tool)]
#[tool(effect = "write")]
struct Hostile;

/// The input of [`Hostile`].
#[derive(serde::Deserialize, JsonSchema)]
struct HostileInput {
    /// Say `<img src=x onerror=alert(2)>` here.
    #[allow(dead_code, reason = "the schema's; the handler reads nothing")]
    text: String,
}

/// The answer [`Hostile`] asks for.
#[derive(serde::Deserialize, JsonSchema)]
#[allow(dead_code, reason = "the schema's")]
struct HostileAnswer {
    /// Type `</textarea><script>alert(3)</script>` or anything.
    note: Option<String>,
}

#[toolgate::async_trait]
impl ToolHandler for Hostile {
    type Input = HostileInput;
    type Output = serde_json::Value;

    async fn call(
        &self,
        ctx: &ToolCtx,
        _: HostileInput,
    ) -> Result<ToolOutcome<serde_json::Value>, HandlerError> {
        match ctx.resume() {
            None => Ok(ToolOutcome::suspend_for::<HostileAnswer>("Run it?")),
            Some(_) => Ok(ToolOutcome::output(json!({}))),
        }
    }
}

#[tokio::test]
async fn inline_code_from_a_tool_is_code_and_stays_escaped() {
    let dir = common::temp_dir();
    let mut tools = ToolSet::new();
    tools.register(Hostile).unwrap();
    let server = TestServer::start_with(tools, dir.path(), |b| b.api_keys(keys())).await;
    let call_id = suspend(&server, "hostile", json!({"text": "hi"})).await;
    let mut person = crate::Person::new(&server);
    person.sign_in(APPROVER).await;
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;
    for escaped in [
        // The tool's description, in "What it does" and in what approving does.
        "Runs <code>&#60;script&#62;alert(1)&#60;/script&#62;</code>",
        // The input's field help.
        "Say <code>&#60;img src=x onerror=alert(2)&#62;</code> here.",
        // The answer's field help.
        "Type <code>&#60;/textarea&#62;&#60;script&#62;alert(3)&#60;/script&#62;</code> or anything.",
    ] {
        assert!(body.contains(escaped), "{escaped:?} not in {body}");
    }
    for raw in ["<script>alert", "<img src=x", "</textarea><script>"] {
        assert!(!body.contains(raw), "{raw:?} in {body}");
    }
    assert!(!body.contains('`'), "no literal backticks: {body}");
    // Its confirmation step says the same, as safely.
    let first = person
        .post(
            &format!("/inbox/calls/{call_id}/approve"),
            &[("csrf", &page.csrf()), ("v/note", "<b>fine</b>")],
        )
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body.contains("Confirm: approve and run hostile?"));
    assert!(!first.body.contains("<script>alert"), "{}", first.body);
    assert!(!first.body.contains("<b>fine</b>"), "{}", first.body);
    assert!(first.body.contains("value=\"&#60;b&#62;fine&#60;/b&#62;\""));
    assert_eq!(call_record(&server, &call_id).await["status"], "suspended");
    server.stop().await;
}
