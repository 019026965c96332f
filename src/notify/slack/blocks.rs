//! The Block Kit of toolgate's Slack messages: the question ([`message`], the body of
//! `chat.postMessage` but its `channel`) and, once the approval is decided on any door, the
//! same message without its buttons, saying who decided, how and when ([`decided`], the body
//! of `chat.update` but its `channel` and `ts`).
//!
//! The buttons are what the interactions door (`POST /integrations/slack/interactions`) reads
//! back: Approve and Reject carry the approval's token as their `value` under the action ids
//! [`APPROVE`] and [`REJECT`]; the inbox's button is a plain link ([`OPEN`]), which Slack also
//! reports and the door ignores. Approve is left out where one click may not decide (an
//! answer to give, a write to confirm): the message says so and links to where to decide.
//!
//! Text from callers, models and upstreams (names, the reason, the input) is never trusted:
//! [`literal`] escapes it as Slack's mrkdwn asks (`&`, `<`, `>`, which defuses `<!channel>`
//! mentions and `<url|text>` links) and breaks its formatting marks, and every text is bounded
//! under Slack's limits (3,000 characters a section, 75 a button, 150 a header).

use serde_json::{Value, json};

use crate::notify::message::{Asked, Decided, How, MessageFacts};

/// The `action_id` of the Approve button.
pub const APPROVE: &str = "toolgate_approve";
/// The `action_id` of the Reject button.
pub const REJECT: &str = "toolgate_reject";
/// The `action_id` of the button that opens the call in the inbox (a link: nothing to decide).
pub const OPEN: &str = "toolgate_open";

/// The longest section text Slack takes is 3,000 characters; a little under it.
const SECTION_MAX: usize = 2900;
/// A header's plain text: at most 150 characters.
const HEADER_MAX: usize = 150;
/// A name (tool, caller) as a message shows it.
const NAME_MAX: usize = 150;
/// The reason, escaped, as a message shows it.
const REASON_MAX: usize = 1500;
/// The fallback `text` (notifications, screen readers).
const FALLBACK_MAX: usize = 600;
/// A zero-width space: put after a formatting mark, it keeps the mark from pairing.
const ZWSP: char = '\u{200b}';

/// The `chat.postMessage` body of `facts` (its `text` and `blocks`; the poster adds the
/// `channel`).
pub fn message(facts: &MessageFacts) -> Value {
    let mut blocks = vec![
        header(&format!("{}: {}", asked_title(facts.asked), facts.tool)),
        asked_section(facts),
    ];
    blocks.extend(input_section(facts));
    blocks.push(context(facts));
    if !facts.one_click {
        blocks.push(section(&format!(
            "This one cannot be approved from Slack in one click: {}. Approve it in the inbox; \
             Reject works here.",
            why_not_one_click()
        )));
    }
    blocks.push(actions(facts));
    json!({
        "text": fallback(facts, None),
        "blocks": blocks,
        "unfurl_links": false,
        "unfurl_media": false,
    })
}

/// The `chat.update` body once `facts`' approval is `decided`: what was asked, who decided,
/// how and when, and no buttons (its `text` and `blocks`; the poster adds `channel` and `ts`).
pub fn decided(facts: &MessageFacts, decided: &Decided) -> Value {
    let sentence = decided_sentence(decided);
    let mut blocks = vec![
        header(&format!("{}: {}", how_title(&decided.how), facts.tool)),
        section(&sentence),
        asked_section(facts),
    ];
    blocks.extend(input_section(facts));
    blocks.push(json!({
        "type": "context",
        "elements": [mrkdwn(&format!(
            "Call {} · <{}|Open in inbox>",
            code(&facts.call_id),
            url_in_mrkdwn(&facts.inbox_url),
        ))],
    }));
    json!({
        "text": fallback(facts, Some(decided)),
        "blocks": blocks,
    })
}

/// Why Approve is not offered, as a message and the door's refusal say it.
pub fn why_not_one_click() -> &'static str {
    "it asks for an answer, or it is a write that the inbox asks you to confirm"
}

/// `text` as literal mrkdwn, at most `max` characters once escaped (an ellipsis saying it was
/// cut): `&`, `<` and `>` escaped as Slack asks, so no mention (`<!channel>`), link
/// (`<https://…|…>`) or user reference survives; a zero-width space after each formatting mark
/// (`*`, `_`, `~`, `` ` ``), so none pairs into bold, italics, strikes or code; line breaks and
/// other control characters as spaces.
pub fn literal(text: &str, max: usize) -> String {
    escaped(text, max, |c, out| {
        if matches!(c, '*' | '_' | '~' | '`') {
            out.push(c);
            out.push(ZWSP);
            true
        } else {
            false
        }
    })
}

/// `text` for inside a code block (where formatting does not apply): escaped, with each
/// backtick a look-alike so that no text closes the block.
fn in_code(text: &str, max: usize) -> String {
    escaped(text, max, |c, out| {
        if c == '`' {
            out.push('\u{2cb}');
            true
        } else {
            false
        }
    })
}

/// `text` escaped char by char (`special` writes a char its own way and says so), cut whole
/// chars and whole entities before `max`.
fn escaped(text: &str, max: usize, special: impl Fn(char, &mut String) -> bool) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    let (mut count, mut one) = (0, String::new());
    for c in text.chars() {
        one.clear();
        match c {
            '&' => one.push_str("&amp;"),
            '<' => one.push_str("&lt;"),
            '>' => one.push_str("&gt;"),
            c if special(c, &mut one) => {}
            c if c.is_control() => one.push(' '),
            c => one.push(c),
        }
        let more = one.chars().count();
        if count + more > max.saturating_sub(1) {
            out.push('…');
            return out;
        }
        count += more;
        out.push_str(&one);
    }
    out
}

/// A name in inline code: escaped, backticks turned to look-alikes, bounded.
pub fn code(name: &str) -> String {
    format!("`{}`", in_code(&name.replace('\n', " "), NAME_MAX))
}

/// A URL of toolgate's own (the inbox's), inside `<…|…>`: the characters that would end it
/// escaped.
fn url_in_mrkdwn(url: &str) -> String {
    url.replace('&', "&amp;")
        .replace('<', "%3C")
        .replace('>', "%3E")
        .replace('|', "%7C")
}

/// A plain-text header, bounded.
fn header(text: &str) -> Value {
    json!({"type": "header", "text": plain(text, HEADER_MAX)})
}

/// A plain text object, bounded (plain text has no markup; emoji codes stay words).
fn plain(text: &str, max: usize) -> Value {
    let mut text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > max {
        text = text.chars().take(max - 1).collect();
        text.push('…');
    }
    json!({"type": "plain_text", "text": text, "emoji": false})
}

/// A mrkdwn text object, of text already made safe.
fn mrkdwn(text: &str) -> Value {
    json!({"type": "mrkdwn", "text": text, "verbatim": true})
}

/// A section of mrkdwn already made safe, bounded.
fn section(text: &str) -> Value {
    let text = if text.chars().count() > SECTION_MAX {
        let mut cut: String = text.chars().take(SECTION_MAX - 1).collect();
        cut.push('…');
        cut
    } else {
        text.to_owned()
    };
    json!({"type": "section", "text": mrkdwn(&text)})
}

fn asked_title(asked: Asked) -> &'static str {
    match asked {
        Asked::Suspended => "Approval needed",
        Asked::Escalated => "Still waiting for a decision",
    }
}

fn how_title(how: &How) -> &'static str {
    match how {
        How::Approved => "Approved",
        How::Rejected { .. } => "Rejected",
        How::Completed => "Completed externally",
        How::Expired => "Expired",
        How::Ended { .. } => "Decided",
    }
}

/// Who asks, as a message names them: "Alice (`corp:alice`)", the name alone, or "someone".
fn asker(facts: &MessageFacts) -> String {
    person(facts.caller.as_deref(), facts.caller_display.as_deref())
        .unwrap_or_else(|| "Someone (auth is off)".into())
}

/// A principal's name (in code) with its display name, if recorded, made safe.
fn person(name: Option<&str>, display: Option<&str>) -> Option<String> {
    match (display, name) {
        (Some(display), Some(name)) if display != name => {
            Some(format!("{} ({})", literal(display, NAME_MAX), code(name)))
        }
        (_, Some(name)) => Some(code(name)),
        (Some(display), None) => Some(literal(display, NAME_MAX)),
        (None, None) => None,
    }
}

/// "*Alice (`corp:alice`)* asks to call `issue_refund`:" and the reason, quoted.
fn asked_section(facts: &MessageFacts) -> Value {
    let reason = literal(&facts.reason, REASON_MAX);
    let reason = if reason.trim().is_empty() {
        "_No reason given._".to_owned()
    } else {
        format!(">{reason}")
    };
    section(&format!(
        "{} asks to call {}:\n{reason}",
        asker(facts),
        code(&facts.tool)
    ))
}

/// The input, one line a field, in a code block bounded under a section's limit; none when
/// the input is empty.
fn input_section(facts: &MessageFacts) -> Option<Value> {
    if facts.input.is_empty() {
        return None;
    }
    let mut body = String::new();
    let budget = SECTION_MAX - 40;
    let mut cut = facts.input_truncated;
    for line in &facts.input {
        let indent = "  ".repeat(line.depth.min(8));
        let mut text = format!("{indent}{}:", in_code(&line.label, 300));
        if let Some(value) = &line.value {
            text.push(' ');
            text.push_str(&in_code(value, 600));
        }
        text.push('\n');
        if body.chars().count() + text.chars().count() > budget {
            cut = true;
            break;
        }
        body.push_str(&text);
    }
    if cut {
        body.push_str("…\n");
    }
    Some(section(&format!("*Input*\n```\n{body}```")))
}

/// The call's id, and when the approval expires (in the reader's own time zone).
fn context(facts: &MessageFacts) -> Value {
    let mut text = format!("Call {}", code(&facts.call_id));
    if let Some(expires) = facts.expires_at {
        text.push_str(&format!(" · expires {}", date(expires)));
    }
    json!({"type": "context", "elements": [mrkdwn(&text)]})
}

/// A point in time as Slack shows it in each reader's time zone, with the UTC time as its
/// fallback.
fn date(at: crate::store::Timestamp) -> String {
    format!(
        "<!date^{}^{{date_short_pretty}} at {{time}}|{at}>",
        at.0.div_euclid(1000)
    )
}

/// Approve (where one click may decide), Reject (with a confirmation), and the inbox.
fn actions(facts: &MessageFacts) -> Value {
    let mut elements = Vec::new();
    let token = bounded_value(&facts.token);
    if facts.one_click {
        elements.push(json!({
            "type": "button",
            "action_id": APPROVE,
            "text": plain("Approve", 75),
            "style": "primary",
            "value": token,
        }));
    }
    elements.push(json!({
        "type": "button",
        "action_id": REJECT,
        "text": plain("Reject", 75),
        "style": "danger",
        "value": token,
        "confirm": {
            "title": plain("Reject this call?", 100),
            "text": plain(&format!("The call of {} will not run.", facts.tool), 300),
            "confirm": plain("Reject", 30),
            "deny": plain("Cancel", 30),
            "style": "danger",
        },
    }));
    let (label, url) = if facts.one_click {
        ("Open in inbox", &facts.inbox_url)
    } else {
        ("Decide in the inbox", &facts.link)
    };
    elements.push(json!({
        "type": "button",
        "action_id": OPEN,
        "text": plain(label, 75),
        "url": url,
    }));
    json!({"type": "actions", "block_id": "toolgate_decide", "elements": elements})
}

/// A button's value: at most 2,000 characters (a token is far shorter).
fn bounded_value(token: &str) -> String {
    token.chars().take(2000).collect()
}

/// "Approved by Alice (`corp:alice`) on <date>." (made safe).
fn decided_sentence(decided: &Decided) -> String {
    let who = person(decided.by.as_deref(), decided.by_display.as_deref())
        .map(|who| format!(" by {who}"))
        .unwrap_or_default();
    let when = date(decided.at);
    match &decided.how {
        How::Approved => format!("*Approved*{who}, {when}."),
        How::Rejected {
            option: Some(option),
        } => format!("*Rejected*{who} ({}), {when}.", literal(option, NAME_MAX)),
        How::Rejected { option: None } => format!("*Rejected*{who}, {when}."),
        How::Completed => format!("*Completed externally*{who}, {when}."),
        How::Expired => format!("*Expired*: nobody decided in time ({when})."),
        How::Ended { status } => format!(
            "The call is *{}* now ({when}).",
            literal(&status.replace('_', " "), NAME_MAX)
        ),
    }
}

/// The message's `text`: what a notification or a screen reader says.
fn fallback(facts: &MessageFacts, decided: Option<&Decided>) -> String {
    let plain_asker = |name: Option<&str>, display: Option<&str>| match (display, name) {
        (Some(display), Some(name)) if display != name => format!("{display} ({name})"),
        (_, Some(name)) => name.to_owned(),
        (Some(display), None) => display.to_owned(),
        (None, None) => "someone".to_owned(),
    };
    let text = match decided {
        None => format!(
            "{}: {} asks to call {}: {}",
            asked_title(facts.asked),
            plain_asker(facts.caller.as_deref(), facts.caller_display.as_deref()),
            facts.tool,
            facts.reason
        ),
        Some(decided) => format!(
            "{}: the call of {} ({}), by {}.",
            how_title(&decided.how),
            facts.tool,
            facts.call_id,
            plain_asker(decided.by.as_deref(), decided.by_display.as_deref())
        ),
    };
    literal(&text, FALLBACK_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_and_cut_whole() {
        let hostile = "<!channel> <https://evil|click> *bold* &amp;";
        let safe = literal(hostile, 1000);
        assert!(!safe.contains('<') && !safe.contains('>'), "{safe}");
        assert!(safe.starts_with("&lt;!channel&gt; &lt;https://evil|click&gt;"));
        assert!(safe.contains("*\u{200b}bold*\u{200b}"));
        assert!(safe.ends_with("&amp;amp;"));
        // Cut before an entity, never inside it.
        assert_eq!(literal("ab<cd", 4), "ab…");
        assert_eq!(literal(&"x".repeat(10), 5), "xxxx…");
        assert_eq!(in_code("a```b", 100), "a\u{2cb}\u{2cb}\u{2cb}b");
    }
}
