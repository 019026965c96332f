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
//! SSRF: a webhook whose host resolves to a loopback, private, link-local, unique-local or
//! cloud-metadata address is refused, at start-up and at every send (the client resolves names
//! itself and connects only to the addresses it checked), unless it sets `allow_private`.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::{Notify, watch};

use crate::store::{
    Delivery, DeliveryResult, FeedCursor, NewDelivery, Store, StoreError, Timestamp,
};

/// Entries the outbox reads at a time.
const PAGE: u32 = 200;
/// Deliveries the sender claims at a time (and sends at once).
const CLAIM: u32 = 16;
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
    client: reqwest::Client,
}

impl std::fmt::Debug for Webhook {
    // The secret is never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url.as_str())
            .field("events", &self.events)
            .field("tools", &self.tools)
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

/// Why a webhook's configuration was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WebhookError(pub String);

/// Delivery settings (`[webhook_delivery]`).
#[derive(Debug, Clone, Copy)]
pub struct DeliverySettings {
    /// How long one attempt may take.
    pub timeout: Duration,
    /// The most attempts of one message.
    pub max_attempts: u32,
    /// The wait before the first retry; it doubles with each attempt.
    pub initial_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
}

/// Reads a secret: `whsec_` followed by the base64 of 24 to 64 bytes.
pub fn parse_secret(secret: &str) -> Result<Vec<u8>, WebhookError> {
    let bad = || {
        WebhookError("must be `whsec_` followed by the base64 of 24 to 64 random bytes".to_owned())
    };
    let encoded = secret.trim().strip_prefix("whsec_").ok_or_else(bad)?;
    let bytes = BASE64.decode(encoded).map_err(|_| bad())?;
    if !(24..=64).contains(&bytes.len()) {
        return Err(bad());
    }
    Ok(bytes)
}

/// `webhook-signature` for a message: `v1,` and the base64 HMAC-SHA256 of
/// `"{id}.{timestamp}.{body}"` keyed by the secret's bytes.
pub fn signature(secret: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// Whether an address is one a webhook may not reach unless it allows private targets:
/// loopback, private, link-local (cloud metadata lives at 169.254.169.254), unique-local,
/// unspecified, and the IPv4 forms of those inside IPv6.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                // 100.64.0.0/10, carrier-grade NAT, and 0.0.0.0/8.
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
                || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                // fc00::/7 unique-local, fe80::/10 link-local.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
            // fd00:ec2::254, AWS's metadata over IPv6, is unique-local already.
        }
    }
}

/// Resolves names for one webhook's client, refusing the addresses it may not reach.
struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|addr| allow_private || !is_private(addr.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(format!(
                    "{host} resolves only to private addresses, which this webhook may not reach"
                )
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl Webhook {
    /// A webhook posting to `url`, signed with `secret` (see [`parse_secret`]), for the entry
    /// types `events` and the tools `tools` (`None`: all). A URL that is not http(s), or whose
    /// host is a private address literal (unless `allow_private`), is refused.
    pub fn new(
        url: &str,
        secret: Vec<u8>,
        events: Option<HashSet<String>>,
        tools: Option<HashSet<String>>,
        allow_private: bool,
        settings: &DeliverySettings,
    ) -> Result<Self, WebhookError> {
        let url =
            reqwest::Url::parse(url).map_err(|err| WebhookError(format!("not a URL: {err}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(WebhookError(
                "must be an http or https URL with a host".into(),
            ));
        }
        if !allow_private
            && let Some(ip) = host_ip(&url)
            && is_private(ip)
        {
            return Err(WebhookError(format!(
                "{ip} is a private address; set allow_private = true to post to it"
            )));
        }
        install_crypto();
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .build()
            .map_err(|err| WebhookError(format!("cannot build an HTTP client: {err}")))?;
        Ok(Webhook {
            url,
            secret,
            events,
            tools,
            allow_private,
            client,
        })
    }

    /// The URL, as the store knows the webhook.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Refuses a host whose name resolves to a private address (unless allowed): at start-up.
    /// A name that does not resolve now is let through; every send checks again.
    pub async fn check_target(&self) -> Result<(), WebhookError> {
        if self.allow_private || host_ip(&self.url).is_some() {
            return Ok(());
        }
        let host = self.url.host_str().unwrap_or_default();
        let port = self.url.port_or_known_default().unwrap_or(443);
        if let Ok(addrs) = tokio::net::lookup_host((host, port)).await
            && let Some(addr) = addrs.into_iter().find(|addr| is_private(addr.ip()))
        {
            return Err(WebhookError(format!(
                "{host} resolves to the private address {}; set allow_private = true to post to it",
                addr.ip()
            )));
        }
        Ok(())
    }

    fn wants(&self, kind: &str, tool: &str) -> bool {
        self.events
            .as_ref()
            .is_none_or(|events| events.contains(kind))
            && self.tools.as_ref().is_none_or(|tools| tools.contains(tool))
    }
}

/// The host of `url` when it is an address literal.
fn host_ip(url: &reqwest::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// rustls needs a process-wide crypto provider: ring, installed once. An application that makes
/// its own `reqwest` clients beside toolgate (the crate is built with `rustls-no-provider`) calls
/// this first.
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The configured webhooks and their two loops.
pub struct Webhooks {
    hooks: Vec<Webhook>,
    settings: DeliverySettings,
}

impl Webhooks {
    /// No webhooks.
    pub fn none() -> Self {
        Webhooks {
            hooks: Vec::new(),
            settings: DeliverySettings {
                timeout: Duration::from_secs(15),
                max_attempts: 10,
                initial_backoff: Duration::from_secs(5),
                max_backoff: Duration::from_secs(36_000),
            },
        }
    }

    /// Refuses a webhook whose host resolves to a private address it may not reach.
    pub async fn check_targets(&self) -> Result<(), WebhookError> {
        for hook in &self.hooks {
            hook.check_target()
                .await
                .map_err(|err| WebhookError(format!("webhook {}: {err}", hook.url())))?;
        }
        Ok(())
    }

    /// Starts the outbox's cursor at the feed's head if it has none (the first start with
    /// webhooks configured on this store), so that what happens from now on is delivered even
    /// if this process dies before its outbox runs. Call it before serving requests; the binary
    /// does.
    pub async fn initialize(&self, store: &dyn Store) -> Result<(), StoreError> {
        if self.hooks.is_empty() || store.webhook_cursor().await?.is_some() {
            return Ok(());
        }
        let head = store.feed_head().await?;
        // Another replica starting at the same time may win: then its cursor stands.
        store.enqueue_deliveries(None, &head, Vec::new()).await?;
        Ok(())
    }

    /// `hooks`, delivered with `settings`.
    pub fn new(hooks: Vec<Webhook>, settings: DeliverySettings) -> Self {
        Webhooks { hooks, settings }
    }

    /// Starts the outbox and the sender on `store`, until `released` turns `true`. The returned
    /// handle wakes the sender at once (an admin's retry).
    pub fn start(self, store: Arc<dyn Store>, released: watch::Receiver<bool>) -> Nudge {
        let nudge = Nudge(Arc::new(Notify::new()));
        if self.hooks.is_empty() {
            return nudge;
        }
        let shared = Arc::new(Shared {
            hooks: self.hooks,
            settings: self.settings,
            disabled: Mutex::new(HashSet::new()),
            started: Timestamp::now(),
        });
        tokio::spawn(outbox(
            store.clone(),
            shared.clone(),
            nudge.clone(),
            released.clone(),
        ));
        tokio::spawn(sender(store, shared, nudge.clone(), released));
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
    settings: DeliverySettings,
    /// Webhooks whose receiver answered 410 Gone.
    disabled: Mutex<HashSet<String>>,
    /// When the webhooks started: on the outbox's first start, what happened before is not
    /// delivered.
    started: Timestamp,
}

/// The message id of an entry for a webhook: the same whoever makes the delivery.
fn message_id(cursor: &FeedCursor, url: &str) -> String {
    use sha2::Digest;
    let mut hash = Sha256::new();
    hash.update(cursor.0.as_bytes());
    hash.update([0]);
    hash.update(url.as_bytes());
    format!("msg_{}", hex::encode(&hash.finalize()[..16]))
}

/// Waits for `what`, `limit`, or the release; `false` once released.
async fn pause(released: &mut watch::Receiver<bool>, limit: Duration, what: impl Future) -> bool {
    tokio::select! {
        _ = what => true,
        () = tokio::time::sleep(limit) => true,
        _ = released.wait_for(|released| *released) => false,
    }
}

/// The outbox loop: feed entries into deliveries.
async fn outbox(
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    nudge: Nudge,
    mut released: watch::Receiver<bool>,
) {
    let mut changes = store.feed_changes();
    let mut fresh = None;
    loop {
        if *released.borrow() {
            return;
        }
        changes.borrow_and_update();
        let step = advance(store.as_ref(), &shared, &mut fresh).await;
        let wait = match step {
            Ok(Advanced::Delivered) => {
                nudge.wake();
                continue;
            }
            Ok(Advanced::Raced) => continue,
            Ok(Advanced::Settling) => Duration::from_millis(20),
            Ok(Advanced::Idle) => IDLE,
            Err(err) => {
                tracing::debug!(error = %err, "the webhook outbox cannot read the feed now");
                IDLE
            }
        };
        if !pause(&mut released, wait, changes.changed()).await {
            return;
        }
    }
}

enum Advanced {
    /// Deliveries were made (or entries passed).
    Delivered,
    /// Another process moved the cursor first.
    Raced,
    /// Newer entries are not final yet.
    Settling,
    /// Nothing new.
    Idle,
}

/// One step of the outbox. `fresh` says whether the outbox had never run on this store when
/// this process started: then it reads the feed from its oldest entry but delivers only what
/// happened since the webhooks started (a change made just after the start is not lost to a
/// race with this loop's first read, and older history is not sent to a new webhook).
async fn advance(
    store: &dyn Store,
    shared: &Shared,
    fresh: &mut Option<bool>,
) -> Result<Advanced, StoreError> {
    let from = store.webhook_cursor().await?;
    let fresh = *fresh.get_or_insert(from.is_none());
    let page = match store.feed(from.as_ref(), PAGE).await {
        Ok(page) => page,
        Err(StoreError::CursorExpired) => {
            let head = store.feed_head().await?;
            tracing::error!(
                "the webhook outbox fell behind the feed's retention; changes before now were \
                 not delivered"
            );
            store
                .enqueue_deliveries(from.as_ref(), &head, Vec::new())
                .await?;
            return Ok(Advanced::Raced);
        }
        Err(err) => return Err(err),
    };
    if page.entries.is_empty() {
        return Ok(if page.settling {
            Advanced::Settling
        } else {
            Advanced::Idle
        });
    }
    let mut deliveries = Vec::new();
    for entry in &page.entries {
        if fresh && entry.at < shared.started {
            continue;
        }
        for hook in shared
            .hooks
            .iter()
            .filter(|hook| hook.wants(&entry.kind, &entry.call.tool))
        {
            let body = serde_json::json!({
                "type": entry.kind,
                "timestamp": entry.at,
                // A webhook's receiver is an approver's system: it gets the token.
                "data": super::entry_data(entry, true),
            });
            deliveries.push(NewDelivery {
                webhook: hook.url().to_owned(),
                message_id: message_id(&entry.cursor, hook.url()),
                kind: entry.kind.clone(),
                call_id: entry.call.call_id.clone(),
                body: body.to_string(),
            });
        }
    }
    Ok(
        if store
            .enqueue_deliveries(from.as_ref(), &page.cursor, deliveries)
            .await?
        {
            Advanced::Delivered
        } else {
            Advanced::Raced
        },
    )
}

/// The sender loop: claims due deliveries and posts them.
async fn sender(
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    nudge: Nudge,
    mut released: watch::Receiver<bool>,
) {
    if let Ok(disabled) = store.disabled_webhooks().await {
        lock(&shared.disabled).extend(disabled);
    }
    // Long enough for one attempt; a claim whose sender died is claimable again after it.
    let lease = shared.settings.timeout + Duration::from_secs(5);
    loop {
        if *released.borrow() {
            return;
        }
        let claimed = match store.claim_deliveries(CLAIM, lease).await {
            Ok(claimed) => claimed,
            Err(err) => {
                tracing::debug!(error = %err, "cannot claim webhook deliveries now");
                Vec::new()
            }
        };
        if claimed.is_empty() {
            if !pause(&mut released, IDLE, nudge.0.notified()).await {
                return;
            }
            continue;
        }
        let sends = claimed.into_iter().map(|delivery| {
            let store = store.clone();
            let shared = shared.clone();
            async move {
                let result = attempt(&shared, &delivery).await;
                crate::metrics::webhook_delivery(match &result {
                    DeliveryResult::Delivered { .. } => "delivered",
                    DeliveryResult::Retry { .. } => "retried",
                    DeliveryResult::Failed { .. } => "failed",
                });
                if let Err(err) = store.settle_delivery(delivery.id, result).await {
                    // The lease runs out and it is sent again: at least once.
                    tracing::warn!(error = %err, delivery = delivery.id, "cannot record a webhook delivery");
                }
            }
        });
        futures_util::future::join_all(sends).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One attempt of `delivery`, and what it amounts to.
async fn attempt(shared: &Shared, delivery: &Delivery) -> DeliveryResult {
    let Some(hook) = shared.hooks.iter().find(|h| h.url() == delivery.webhook) else {
        return DeliveryResult::Failed {
            status: None,
            error: "the webhook is no longer configured".into(),
        };
    };
    if lock(&shared.disabled).contains(&delivery.webhook) {
        return DeliveryResult::Failed {
            status: None,
            error: "the webhook is disabled: its receiver answered 410 Gone".into(),
        };
    }
    let timestamp = Timestamp::now().0 / 1000;
    let response = hook
        .client
        .post(hook.url.clone())
        .header("content-type", "application/json")
        .header("webhook-id", &delivery.message_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header(
            "webhook-signature",
            signature(
                &hook.secret,
                &delivery.message_id,
                timestamp,
                &delivery.body,
            ),
        )
        .body(delivery.body.clone())
        .send()
        .await;
    let settings = &shared.settings;
    match response {
        Ok(response) if response.status().is_success() => DeliveryResult::Delivered {
            status: response.status().as_u16(),
        },
        Ok(response) if response.status() == reqwest::StatusCode::GONE => {
            lock(&shared.disabled).insert(delivery.webhook.clone());
            tracing::warn!(webhook = %delivery.webhook, "a webhook's receiver answered 410 Gone: the webhook is disabled");
            DeliveryResult::Failed {
                status: Some(410),
                error: "410 Gone: the webhook is disabled".into(),
            }
        }
        Ok(response) => {
            let status = response.status();
            let retry_after = matches!(status.as_u16(), 429 | 503)
                .then(|| {
                    response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs)
                })
                .flatten();
            again(
                settings,
                delivery.attempts,
                Some(status.as_u16()),
                format!("the receiver answered {status}"),
                retry_after,
            )
        }
        Err(err) => {
            let error = if err.is_timeout() {
                format!("no answer within {} ms", settings.timeout.as_millis())
            } else if err.is_connect() {
                "the connection was refused or could not be made".to_owned()
            } else {
                "the request failed".to_owned()
            };
            again(settings, delivery.attempts, None, error, None)
        }
    }
}

/// A failed attempt: retried after a backoff with jitter (or the receiver's `Retry-After`),
/// unless that was the last.
fn again(
    settings: &DeliverySettings,
    attempts: u32,
    status: Option<u16>,
    error: String,
    retry_after: Option<Duration>,
) -> DeliveryResult {
    if attempts >= settings.max_attempts {
        return DeliveryResult::Failed {
            status,
            error: format!("{error}; gave up after {attempts} attempts"),
        };
    }
    let wait = retry_after.unwrap_or_else(|| {
        let base = settings
            .initial_backoff
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        // Jitter: between half and all of the exponential wait, so that receivers coming back
        // are not hit by every sender at once.
        let mut byte = [0u8; 1];
        let _ = getrandom::fill(&mut byte);
        base.mul_f64(0.5 + f64::from(byte[0]) / 510.0)
    });
    let wait = wait.min(settings.max_backoff);
    let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    DeliveryResult::Retry {
        at: Timestamp(Timestamp::now().0.saturating_add(wait_ms)),
        status,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let secret = parse_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_!!",
            "whsec_c2hvcnQ=",
        ] {
            assert!(parse_secret(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn private_targets_are_recognised() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }
}
