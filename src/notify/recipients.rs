//! Who a channel tells of an approval: the people who may decide it (for an escalation, the
//! ones its policy's `escalate_to` reaches), minus its caller where the tool's policy keeps
//! callers apart from approvers (four eyes), each through their address for the channel; plus
//! the channel's fixed recipients. A person without an address for the channel is skipped.

use super::Channel;
use super::message::Asked;
use super::people::People;
use crate::dispatch::Dispatcher;

/// One recipient of a channel's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    /// The person (`[[people]]` name), or `None` for a fixed recipient.
    pub person: Option<String>,
    /// Their address on the channel: an email address, a Slack user or channel id.
    pub address: String,
}

/// The recipients of `channel`'s message about an approval of `tool` asked of `caller`
/// (`asked`: suspended or escalated), in `people`'s order, then the fixed ones; an address
/// once.
pub fn recipients(
    channel: &Channel,
    people: &People,
    dispatcher: &Dispatcher,
    asked: Asked,
    tool: &str,
    caller: Option<&str>,
) -> Vec<Recipient> {
    let rule = dispatcher.approval_rule(tool);
    let escalated = matches!(asked, Asked::Escalated);
    let mut out: Vec<Recipient> = Vec::new();
    for person in people.iter() {
        let Some(principal) = &person.principal else {
            continue;
        };
        let reached = dispatcher.approval_reaches(principal, tool, escalated);
        if !reached || rule.refuses(caller, principal.name.as_deref()) {
            continue;
        }
        if let Some(address) = channel.address_of(person) {
            push(&mut out, Some(person.name.clone()), address);
        }
    }
    for address in channel.fixed() {
        push(&mut out, None, &address);
    }
    out
}

fn push(out: &mut Vec<Recipient>, person: Option<String>, address: &str) {
    if out.iter().any(|r| r.address == address) {
        return;
    }
    out.push(Recipient {
        person,
        address: address.to_owned(),
    });
}
