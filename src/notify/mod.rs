//! Approvers where they work: the people a channel reaches (`[[people]]`), and the channels
//! that ask them by mail and in Slack when a call waits for their decision (`[[notify]]`).
//!
//! A floor above the lifecycle (`dispatch`) and identity, below the shared HTTP layer and the
//! doors: the doors that decide through a channel (Slack's interactions, a decision link) ask
//! it who a person is; the composition root wires its channels into the webhooks' outbox.
//!
//! Messages ride that outbox (`crate::feed::channels`): for each feed entry that asks a person
//! (`call.suspended`, `call.escalated`), [`Notifier`] makes one delivery per channel and
//! recipient (who is told: [`recipients`]), its body the [`MessageFacts`](message::MessageFacts)
//! of the call, so every attempt sends the same message; once the call's approval is decided on
//! any door, it makes update deliveries that edit each Slack message it posted (mail cannot be
//! edited). The outbox makes them in the transaction that moves its cursor, so they are made
//! once across replicas and survive a crash; the sender sends them at least once, with retries.
//!
//! By job: [`config`] reads `[[notify]]`, [`people`] is `[[people]]`, [`message`] says what a
//! message says, [`recipients`] whom it reaches, [`email`] and [`slack`] send it, and the
//! `outbox` module is the seam with the outbox.

pub mod config;
pub mod email;
pub mod links;
pub mod message;
mod outbox;
pub mod people;
pub mod recipients;
pub mod slack;

use std::sync::Arc;

use async_trait::async_trait;

use crate::dispatch::Dispatcher;
use crate::dispatch::who::Reach;
use crate::feed::channels::Channels;
use message::MessageFacts;

pub use links::Links;
pub use outbox::Notifier;
pub use people::{People, PeopleError, Person, PersonConfig};

/// One configured channel.
pub struct Channel {
    /// Its `name`.
    pub(crate) name: String,
    /// The feed types it is told of.
    pub(crate) on: Vec<String>,
    /// The tools whose calls it is told of.
    pub(crate) tools: Reach,
    /// How it sends.
    pub(crate) kind: ChannelKind,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("on", &self.on)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// How a channel sends.
pub(crate) enum ChannelKind {
    /// Mail over SMTP.
    Email(email::Mailer),
    /// Slack's Web API.
    Slack(slack::api::SlackApi),
}

impl Channel {
    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address a person is reached at through this channel, if they have one.
    fn address_of<'p>(&self, person: &'p people::Person) -> Option<&'p str> {
        match &self.kind {
            ChannelKind::Email(_) => person.email.as_deref(),
            ChannelKind::Slack(_) => person.slack_user.as_deref(),
        }
    }

    /// The channel's fixed recipients (`to`, `channel`).
    fn fixed(&self) -> Vec<String> {
        match &self.kind {
            ChannelKind::Email(mailer) => mailer.to().to_vec(),
            ChannelKind::Slack(api) => api.channel().into_iter().map(str::to_owned).collect(),
        }
    }
}

/// The link a message gives a person to decide with. The inbox's page of the call until signed
/// decision links make one per person ([`InboxLinks`]); the composition root picks.
#[async_trait]
pub trait LinkMaker: Send + Sync {
    /// The link in `facts`' message for `person` (a `[[people]]` name; `None`: a fixed
    /// recipient, who gets the inbox's page).
    async fn link(&self, facts: &MessageFacts, person: Option<&str>) -> Result<String, String>;
}

/// Links to the call's page in the inbox, which needs its sign-in.
pub struct InboxLinks;

#[async_trait]
impl LinkMaker for InboxLinks {
    async fn link(&self, facts: &MessageFacts, _person: Option<&str>) -> Result<String, String> {
        Ok(facts.inbox_url.clone())
    }
}

/// The configured channels and people, before the server binds them to its lifecycle.
pub struct Notify {
    channels: Vec<Channel>,
    people: Arc<People>,
    links: Arc<dyn LinkMaker>,
}

impl Notify {
    /// `channels` reaching `people`, with links to the inbox's pages.
    pub fn new(channels: Vec<Channel>, people: People) -> Self {
        Notify {
            channels,
            people: Arc::new(people),
            links: Arc::new(InboxLinks),
        }
    }

    /// These channels, with their messages' links made by `links`.
    pub fn with_links(mut self, links: Arc<dyn LinkMaker>) -> Self {
        self.links = links;
        self
    }

    /// Whether no channel is configured (then nothing is made, nothing costs).
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// The people.
    pub fn people(&self) -> &Arc<People> {
        &self.people
    }

    /// Each Slack channel's signing secret and Web API URL, for the channels that have a
    /// secret: the apps whose requests the interactions door accepts.
    pub fn slack_apps(&self) -> Vec<(&str, &str)> {
        self.channels
            .iter()
            .filter_map(|channel| match &channel.kind {
                ChannelKind::Slack(api) => Some((api.signing_secret()?, api.api_url())),
                ChannelKind::Email(_) => None,
            })
            .collect()
    }

    /// Warns about each channel that reaches nobody: no fixed recipient, and no person with an
    /// address for it.
    pub fn warn_unreached(&self) {
        for channel in &self.channels {
            let reached = !channel.fixed().is_empty()
                || self
                    .people
                    .iter()
                    .any(|person| channel.address_of(person).is_some());
            if !reached {
                tracing::warn!(
                    channel = %channel.name,
                    "the notification channel reaches nobody: no fixed recipient, and no \
                     [[people]] entry with an address for it"
                );
            }
        }
    }

    /// The channels bound to `dispatcher`, their links under `inbox_base` (`[inbox]
    /// public_url`, or `http://<listen address>`): what the outbox carries; `None` without a
    /// channel.
    pub fn bind(self, dispatcher: Dispatcher, inbox_base: String) -> Option<Arc<dyn Channels>> {
        if self.channels.is_empty() {
            return None;
        }
        self.warn_unreached();
        Some(Arc::new(Notifier::new(
            self.channels,
            self.people,
            dispatcher,
            inbox_base,
            self.links,
        )))
    }
}
