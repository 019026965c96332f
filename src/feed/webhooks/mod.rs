//! Webhooks (Standard Webhooks v1): each feed entry that matches a configured webhook becomes a
//! durable delivery, sent at least once, signed, never in the way of a call.
//!
//! Two loops per process. The outbox follows the feed from a cursor kept in the store and turns
//! each entry into one delivery per matching webhook, moving the cursor in the same transaction
//! (of several replicas, one moves it; see `Store::enqueue_deliveries`). Feed entries are
//! committed with the change they describe, so a process killed right after a commit still has
//! its change delivered: whoever moves the cursor next makes the delivery. The sender claims due
//! deliveries for a lease (so a replica killed mid-delivery loses none: the lease runs out and
//! another sends it), posts them, and records the outcome: 2xx delivered; `410 Gone` disables the
//! webhook; 429 and 503 are retried after their `Retry-After`; anything else (another status, a
//! timeout, a refused connection) is retried with exponential backoff and jitter until
//! `max_attempts`.
//!
//! The request: `POST` with `content-type: application/json`, the body
//! `{"type", "timestamp", "data"}`, and the headers `webhook-id` (the same on every attempt of
//! one message), `webhook-timestamp` (Unix seconds of the attempt) and `webhook-signature:
//! v1,<base64 of HMAC-SHA256 of "{id}.{timestamp}.{body}" keyed by the secret's bytes>`.
//!
//! SSRF: a webhook whose host resolves to an address that is not globally reachable (loopback,
//! private, link-local, cloud metadata, and the rest of the IANA special-purpose blocks) is
//! refused, at start-up and at every send (the client resolves names itself and connects only
//! to the addresses it checked), unless it sets `allow_private`.
//!
//! By job: `private.rs` says which addresses are inside the network, `target.rs` keeps a
//! webhook from reaching them, `sign.rs` signs, the outbox (`outbox.rs`) queues, the sender
//! (`sender.rs`) posts, and [`config`] reads the `[[webhooks]]` and `[webhook_delivery]`
//! sections. This module is the seam: the configured
//! [`Webhooks`], which start both loops, and the [`Nudge`] that wakes the sender.

pub mod config;
mod outbox;
mod private;
mod sender;
mod sign;
mod target;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::channels::Channels;
use crate::store::{Store, StoreError, Timestamp};

pub use outbox::message_id;
pub use private::is_private;
pub use sign::{parse_secret, signature};

/// How often both loops look again without being woken.
const IDLE: Duration = Duration::from_secs(1);

/// One configured webhook.
#[derive(Clone)]
pub struct Webhook {
    url: reqwest::Url,
    secret: Vec<u8>,
    events: Option<HashSet<String>>,
    tools: Option<HashSet<String>>,
    allow_private: bool,
    /// The proxy the client goes through, checked like the URL.
    proxy: Option<reqwest::Url>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Webhook {
    // Neither the secret nor the URL's path (often a secret too) is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &target::shown(self.url.as_str()))
            .field("events", &self.events)
            .field("tools", &self.tools)
            .field("allow_private", &self.allow_private)
            .field(
                "proxy",
                &self.proxy.as_ref().map(|p| target::shown(p.as_str())),
            )
            .finish_non_exhaustive()
    }
}

/// Why a webhook's configuration was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WebhookError(pub String);

/// Delivery settings (`[webhook_delivery]`).
#[derive(Clone)]
pub struct DeliverySettings {
    /// How long one attempt may take.
    pub timeout: Duration,
    /// The most attempts of one message.
    pub max_attempts: u32,
    /// The wait before the first retry; it doubles with each attempt.
    pub initial_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// The HTTP proxy every webhook posts through; `None`: none, whatever the environment's
    /// `HTTP_PROXY` and the like say.
    pub proxy: Option<reqwest::Url>,
}

impl std::fmt::Debug for DeliverySettings {
    // A proxy's URL may carry a password: only its scheme, host and port are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliverySettings")
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field(
                "proxy",
                &self.proxy.as_ref().map(|p| target::shown(p.as_str())),
            )
            .finish()
    }
}

impl Default for DeliverySettings {
    /// 15 s an attempt, 10 attempts, backoff from 5 s up to 10 hours.
    fn default() -> Self {
        DeliverySettings {
            timeout: Duration::from_secs(15),
            max_attempts: 10,
            initial_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(36_000),
            proxy: None,
        }
    }
}

impl Webhook {
    /// A webhook posting to `url`, signed with `secret` (see [`parse_secret`]), for the entry
    /// types `events` and the tools `tools` (`None`: all). A URL that is not http(s), or whose
    /// host is a private address literal (unless `allow_private`), is refused, and so is a
    /// proxy in `settings` that is.
    pub fn new(
        url: &str,
        secret: Vec<u8>,
        events: Option<HashSet<String>>,
        tools: Option<HashSet<String>>,
        allow_private: bool,
        settings: &DeliverySettings,
    ) -> Result<Self, WebhookError> {
        let url = target::check_url(url, allow_private)?;
        let proxy = settings
            .proxy
            .as_ref()
            .map(|proxy| target::check_proxy(proxy.as_str(), allow_private))
            .transpose()?;
        let client = target::client(settings, allow_private)?;
        Ok(Webhook {
            url,
            secret,
            events,
            tools,
            allow_private,
            proxy,
            client,
        })
    }

    /// The URL, as the store knows the webhook.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// The URL as logs and errors show it: scheme, host and port, never its path or query.
    pub fn shown(&self) -> String {
        target::shown(self.url.as_str())
    }

    /// Refuses a host whose name resolves to a private address (unless allowed): at start-up.
    /// A name that does not resolve now is let through; every send checks again.
    pub async fn check_target(&self) -> Result<(), WebhookError> {
        target::check_resolved(&self.url, self.allow_private).await?;
        if let Some(proxy) = &self.proxy {
            target::check_resolved(proxy, self.allow_private)
                .await
                .map_err(|err| WebhookError(format!("its proxy: {err}")))?;
        }
        Ok(())
    }

    /// Whether it is sent `entry`: one of its `events` (by default every call's; an upstream
    /// tool's change only when named, as it carries no call), of its `tools` (an upstream
    /// tool's by the name it is served as).
    fn wants(&self, entry: &crate::store::FeedEntry) -> bool {
        self.events
            .as_ref()
            .map_or(entry.call().is_some(), |events| {
                events.contains(&entry.kind)
            })
            && self
                .tools
                .as_ref()
                .is_none_or(|tools| entry.tool().is_some_and(|tool| tools.contains(tool)))
    }
}

/// The configured webhooks (and the notification channels riding their outbox) and their two
/// loops.
pub struct Webhooks {
    hooks: Vec<Webhook>,
    settings: DeliverySettings,
    channels: Option<Arc<dyn Channels>>,
}

impl Webhooks {
    /// No webhooks.
    pub fn none() -> Self {
        Webhooks {
            hooks: Vec::new(),
            settings: DeliverySettings::default(),
            channels: None,
        }
    }

    /// These webhooks, and `channels` (`[[notify]]`) whose messages ride their outbox,
    /// delivered with the same settings.
    pub fn with_channels(mut self, channels: Option<Arc<dyn Channels>>) -> Self {
        self.channels = channels;
        self
    }

    /// Refuses a webhook whose host resolves to a private address it may not reach.
    pub async fn check_targets(&self) -> Result<(), WebhookError> {
        for hook in &self.hooks {
            hook.check_target()
                .await
                .map_err(|err| WebhookError(format!("webhook {}: {err}", hook.shown())))?;
        }
        Ok(())
    }

    /// Starts the outbox's cursor at the feed's head if it has none (the first start with
    /// webhooks, or `channels`, configured on this store), so that what happens from now on is
    /// delivered even if this process dies before its outbox runs. Call it before serving
    /// requests; the binary does.
    pub async fn initialize(&self, store: &dyn Store, channels: bool) -> Result<(), StoreError> {
        let idle = self.hooks.is_empty() && !channels && self.channels.is_none();
        if idle || store.webhook_cursor().await?.is_some() {
            return Ok(());
        }
        let head = store.feed_head().await?;
        // Another replica starting at the same time may win: then its cursor stands.
        store.enqueue_deliveries(None, &head, Vec::new()).await?;
        Ok(())
    }

    /// `hooks`, delivered with `settings`.
    pub fn new(hooks: Vec<Webhook>, settings: DeliverySettings) -> Self {
        Webhooks {
            hooks,
            settings,
            channels: None,
        }
    }

    /// Starts the outbox and the sender on `store`, until `released` turns `true`. The returned
    /// handle wakes the sender at once (an admin's retry).
    pub fn start(self, store: Arc<dyn Store>, released: watch::Receiver<bool>) -> Nudge {
        let nudge = Nudge(Arc::new(Notify::new()));
        if self.hooks.is_empty() && self.channels.is_none() {
            return nudge;
        }
        let shared = Arc::new(Shared {
            hooks: self.hooks,
            channels: self.channels,
            settings: self.settings,
            disabled: Mutex::new(HashSet::new()),
            started: Timestamp::now(),
        });
        let run = Loop {
            store,
            shared,
            nudge: nudge.clone(),
            released,
        };
        tokio::spawn(outbox::outbox(run.clone()));
        tokio::spawn(sender::sender(run));
        nudge
    }
}

/// Wakes the sender.
#[derive(Clone)]
pub struct Nudge(Arc<Notify>);

impl Nudge {
    /// Makes the sender look for due deliveries now.
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

struct Shared {
    hooks: Vec<Webhook>,
    /// The notification channels, if any are configured.
    channels: Option<Arc<dyn Channels>>,
    settings: DeliverySettings,
    /// Webhooks whose receiver answered 410 Gone.
    disabled: Mutex<HashSet<String>>,
    /// When the webhooks started: on the outbox's first start, what happened before is not
    /// delivered.
    started: Timestamp,
}

/// What both loops run on: the store, the webhooks, the sender's nudge, and the release that
/// stops them.
#[derive(Clone)]
struct Loop {
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    nudge: Nudge,
    released: watch::Receiver<bool>,
}

/// Waits for `what`, `limit`, or the release; `false` once released.
async fn pause(released: &mut watch::Receiver<bool>, limit: Duration, what: impl Future) -> bool {
    tokio::select! {
        _ = what => true,
        () = tokio::time::sleep(limit) => true,
        _ = released.wait_for(|released| *released) => false,
    }
}
