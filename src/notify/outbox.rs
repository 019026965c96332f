//! The channels as the webhooks' outbox carries them ([`Channels`]): which deliveries a feed
//! entry makes, and how one is sent.
//!
//! An entry that asks a person (`call.suspended`, `call.escalated`, of a call that still waits
//! on that approval when the outbox reads it) makes one delivery per channel that wants it and
//! recipient, its body an [`Body::Ask`] with the call's facts. Any later entry of the call that
//! leaves that approval (decided on any door, expired, asked again) makes one update per Slack
//! message posted about it ([`Body::Update`]); an update whose post is not sent yet waits for
//! it. Message ids are the same whoever makes them: a hash of the entry's cursor, the channel
//! and the recipient (or the post updated).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::message::{Asked, Decided, MessageFacts};
use super::people::People;
use super::recipients::recipients;
use super::slack::api::Posted;
use super::{Channel, ChannelKind, LinkMaker};
use crate::dispatch::Dispatcher;
use crate::feed::channels::{Channels, Sent};
use crate::feed::webhooks::message_id;
use crate::store::{
    CallRecord, CallStatus, CallSummary, Delivery, DeliveryStatus, FeedEntry, NewDelivery,
    StoreError, Timestamp,
};

/// How long after the next attempt of the message it updates an update tries again, while that
/// message is not posted yet.
const POST_PENDING: Duration = Duration::from_secs(1);

/// A channel's delivery's body, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "send", rename_all = "snake_case")]
pub(crate) enum Body {
    /// Ask a person to decide.
    Ask {
        /// What the message says.
        facts: Box<MessageFacts>,
        /// The `[[people]]` name it goes to (`None`: a fixed recipient).
        person: Option<String>,
    },
    /// Update a posted message: the approval was decided.
    Update {
        /// What the message said.
        facts: Box<MessageFacts>,
        /// How it was decided.
        decided: Decided,
        /// The message id of the delivery that posted it.
        of: String,
    },
}

/// The channels, bound to the lifecycle that says who may decide.
pub struct Notifier {
    channels: Vec<Channel>,
    people: Arc<People>,
    dispatcher: Dispatcher,
    inbox_base: String,
    links: Arc<dyn LinkMaker>,
}

impl Notifier {
    pub(super) fn new(
        channels: Vec<Channel>,
        people: Arc<People>,
        dispatcher: Dispatcher,
        inbox_base: String,
        links: Arc<dyn LinkMaker>,
    ) -> Self {
        Notifier {
            channels,
            people,
            dispatcher,
            inbox_base,
            links,
        }
    }

    async fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        self.dispatcher.store().call(call_id).await
    }

    /// The deliveries asking the recipients of each channel wanting `entry` (`asked`).
    async fn asks(
        &self,
        entry: &FeedEntry,
        summary: &CallSummary,
        asked: Asked,
    ) -> Result<Vec<NewDelivery>, StoreError> {
        let wanted: Vec<&Channel> = self
            .channels
            .iter()
            .filter(|c| c.on.contains(&entry.kind) && c.tools.allows(&summary.tool))
            .collect();
        let Some(token) = entry.suspension.as_ref().map(|s| &s.token) else {
            return Ok(Vec::new());
        };
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let Some(call) = self.call(&summary.call_id).await? else {
            return Ok(Vec::new());
        };
        // Decided already (the outbox reads behind): nobody is asked what is settled.
        let waiting = call.status == CallStatus::Suspended
            && call.suspension.as_ref().is_some_and(|s| &s.token == token);
        if !waiting {
            return Ok(Vec::new());
        }
        let tools = self.dispatcher.tools();
        let schema = tools
            .tools()
            .get(&call.tool)
            .map_or(serde_json::Value::Bool(true), |tool| {
                tool.input_schema().clone()
            });
        let Some(facts) = MessageFacts::of(asked, &call, &schema, &self.inbox_base) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for channel in wanted {
            let told = recipients(
                channel,
                &self.people,
                &self.dispatcher,
                asked,
                &call.tool,
                call.caller.as_deref(),
            );
            for recipient in told {
                let body = Body::Ask {
                    facts: Box::new(facts.clone()),
                    person: recipient.person,
                };
                let target = format!("notify\0{}\0{}", channel.name, recipient.address);
                out.push(NewDelivery {
                    webhook: String::new(),
                    message_id: message_id(&entry.cursor, &target),
                    kind: entry.kind.clone(),
                    call_id: call.call_id.clone(),
                    body: serde_json::to_string(&body).unwrap_or_default(),
                    channel: Some(channel.name.clone()),
                    recipient: Some(recipient.address),
                });
            }
        }
        Ok(out)
    }

    /// The updates of the Slack messages posted about `entry`'s call's approval, which `entry`
    /// leaves; `made` may hold posts not stored yet.
    async fn updates(
        &self,
        entry: &FeedEntry,
        summary: &CallSummary,
        made: &[NewDelivery],
    ) -> Result<Vec<NewDelivery>, StoreError> {
        let slack = |name: &str| {
            self.channels
                .iter()
                .any(|c| c.name == name && matches!(c.kind, ChannelKind::Slack(_)))
        };
        if !self
            .channels
            .iter()
            .any(|c| matches!(c.kind, ChannelKind::Slack(_)) && c.tools.allows(&summary.tool))
        {
            return Ok(Vec::new());
        }
        let call_id = &summary.call_id;
        let stored = self.dispatcher.store().call_notifications(call_id).await?;
        let mut sent: Vec<(String, String, String, Body)> = Vec::new();
        let bodies = stored
            .iter()
            .map(|d| (&d.channel, &d.recipient, &d.message_id, &d.body))
            .chain(
                made.iter()
                    .filter(|d| &d.call_id == call_id)
                    .map(|d| (&d.channel, &d.recipient, &d.message_id, &d.body)),
            );
        for (channel, recipient, id, body) in bodies {
            let (Some(channel), Some(recipient)) = (channel, recipient) else {
                continue;
            };
            if !slack(channel) {
                continue;
            }
            if let Ok(body) = serde_json::from_str::<Body>(body) {
                sent.push((channel.clone(), recipient.clone(), id.clone(), body));
            }
        }
        let updated: Vec<String> = sent
            .iter()
            .filter_map(|(.., body)| match body {
                Body::Update { of, .. } => Some(of.clone()),
                Body::Ask { .. } => None,
            })
            .collect();
        let asked_now = entry.suspension.as_ref().map(|s| s.token.as_str());
        let mut decided: Option<Decided> = None;
        let mut out = Vec::new();
        for (channel, recipient, id, body) in &sent {
            let Body::Ask { facts, .. } = body else {
                continue;
            };
            // The approval this entry is about is still asked; one already updated stays.
            if asked_now == Some(facts.token.as_str()) || updated.contains(id) {
                continue;
            }
            if decided.is_none() {
                let Some(call) = self.call(call_id).await? else {
                    return Ok(Vec::new());
                };
                decided = Some(Decided::of(&entry.kind, &call, entry.at));
            }
            let Some(decided) = decided.clone() else {
                continue;
            };
            let body = Body::Update {
                facts: facts.clone(),
                decided,
                of: id.clone(),
            };
            out.push(NewDelivery {
                webhook: String::new(),
                message_id: message_id(&entry.cursor, &format!("notify-update\0{id}")),
                kind: entry.kind.clone(),
                call_id: call_id.clone(),
                body: serde_json::to_string(&body).unwrap_or_default(),
                channel: Some(channel.clone()),
                recipient: Some(recipient.clone()),
            });
        }
        Ok(out)
    }

    /// Sends the update `body` of `delivery` once the post it updates is sent.
    async fn update(
        &self,
        channel: &Channel,
        delivery: &Delivery,
        facts: &MessageFacts,
        decided: &Decided,
        of: &str,
    ) -> Sent {
        let ChannelKind::Slack(api) = &channel.kind else {
            return Sent::Failed {
                status: None,
                error: "only Slack messages are updated".into(),
            };
        };
        let posts = match self
            .dispatcher
            .store()
            .call_notifications(&delivery.call_id)
            .await
        {
            Ok(posts) => posts,
            Err(err) => {
                return Sent::Retry {
                    status: None,
                    error: format!("cannot read the message to update: {err}"),
                    after: None,
                };
            }
        };
        let Some(post) = posts.into_iter().find(|d| d.message_id == of) else {
            return Sent::Failed {
                status: None,
                error: "the message to update is gone".into(),
            };
        };
        match post.status {
            DeliveryStatus::Pending => {
                // Tried again once the post has had its next attempt.
                let due = post
                    .next_attempt_at
                    .map_or(0, |at| at.0 - Timestamp::now().0);
                let due = Duration::from_millis(u64::try_from(due).unwrap_or(0));
                Sent::Retry {
                    status: None,
                    error: "the message to update is not posted yet".into(),
                    after: Some(due + POST_PENDING),
                }
            }
            DeliveryStatus::Failed => Sent::Failed {
                status: None,
                error: "the message to update was never posted".into(),
            },
            DeliveryStatus::Delivered => {
                let posted = post
                    .receipt
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<Posted>(r).ok());
                match posted {
                    Some(posted) => api.update(&posted, facts, decided).await,
                    None => Sent::Failed {
                        status: None,
                        error: "the posted message's receipt is missing".into(),
                    },
                }
            }
        }
    }
}

#[async_trait]
impl Channels for Notifier {
    async fn deliveries(
        &self,
        entry: &FeedEntry,
        made: &[NewDelivery],
    ) -> Result<Vec<NewDelivery>, StoreError> {
        // A change of an upstream's tool is no approval: no channel tells of it.
        let Some(summary) = entry.call() else {
            return Ok(Vec::new());
        };
        match entry.kind.as_str() {
            "call.suspended" => {
                let mut out = self.updates(entry, summary, made).await?;
                out.extend(self.asks(entry, summary, Asked::Suspended).await?);
                Ok(out)
            }
            "call.escalated" => self.asks(entry, summary, Asked::Escalated).await,
            // Still waiting on the same approval.
            "call.approval_recorded" => Ok(Vec::new()),
            _ => self.updates(entry, summary, made).await,
        }
    }

    async fn send(&self, delivery: &Delivery) -> Sent {
        let Some(channel) = self
            .channels
            .iter()
            .find(|c| Some(&c.name) == delivery.channel.as_ref())
        else {
            return Sent::Failed {
                status: None,
                error: "the channel is no longer configured".into(),
            };
        };
        let recipient = delivery.recipient.as_deref().unwrap_or_default();
        let body = match serde_json::from_str::<Body>(&delivery.body) {
            Ok(body) => body,
            Err(err) => {
                return Sent::Failed {
                    status: None,
                    error: format!("the delivery's body cannot be read: {err}"),
                };
            }
        };
        match body {
            Body::Ask { mut facts, person } => {
                match self.links.link(&facts, person.as_deref()).await {
                    Ok(link) => facts.link = link,
                    Err(err) => {
                        return Sent::Retry {
                            status: None,
                            error: format!("cannot make the decision link: {err}"),
                            after: None,
                        };
                    }
                }
                match &channel.kind {
                    ChannelKind::Email(mailer) => {
                        mailer.send(&facts, recipient, &delivery.message_id).await
                    }
                    ChannelKind::Slack(api) => api.post(&facts, recipient).await,
                }
            }
            Body::Update {
                facts, decided, of, ..
            } => self.update(channel, delivery, &facts, &decided, &of).await,
        }
    }
}
