//! `[[webhooks]]` and `[webhook_delivery]`: the webhooks' config sections, and their
//! translation into [`Webhooks`].
//!
//! The file's entries are checked when it is read (`checking`: a `secret_env` that is not set
//! yet is let through), and again with their secrets read when the webhooks start, so a bad URL,
//! secret or event type stops the start naming its key.

use std::time::Duration;

use serde::Deserialize;

use super::{DeliverySettings, Webhook, Webhooks, parse_secret};
use crate::base::{Invalid, invalid};

/// One `[[webhooks]]` entry.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where to `POST`.
    pub url: String,
    /// `whsec_` followed by the base64 of 24 to 64 random bytes.
    #[serde(default)]
    pub secret: Option<String>,
    /// The environment variable holding the secret, instead of `secret`.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// The entry types to send (`call.suspended`, ...); unset: all.
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// Only calls of these tools; unset: all.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Allow a URL whose host is a loopback, private or link-local address.
    #[serde(default)]
    pub allow_private: bool,
}

impl std::fmt::Debug for WebhookConfig {
    // Neither the secret nor the URL's path (often a secret too) is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &super::target::shown(&self.url))
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("secret_env", &self.secret_env)
            .field("events", &self.events)
            .field("tools", &self.tools)
            .field("allow_private", &self.allow_private)
            .finish()
    }
}

/// `[webhook_delivery]`.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookDeliveryConfig {
    /// How long one attempt may take, in milliseconds.
    pub timeout_ms: u64,
    /// The most attempts of one message.
    pub max_attempts: u32,
    /// The wait before the first retry, in milliseconds; it doubles with each attempt.
    pub initial_backoff_ms: u64,
    /// The longest wait between attempts, in milliseconds.
    pub max_backoff_ms: u64,
    /// The HTTP proxy every webhook posts through (`http://host:port`); empty: none, whatever
    /// the environment's `HTTP_PROXY` and the like say.
    pub proxy: String,
}

impl std::fmt::Debug for WebhookDeliveryConfig {
    // A proxy's URL may carry a password: only its scheme, host and port are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookDeliveryConfig")
            .field("timeout_ms", &self.timeout_ms)
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff_ms", &self.initial_backoff_ms)
            .field("max_backoff_ms", &self.max_backoff_ms)
            .field("proxy", &super::target::shown(&self.proxy))
            .finish()
    }
}

impl Default for WebhookDeliveryConfig {
    // The defaults are the sender's own, so that a server built without a file delivers alike.
    fn default() -> Self {
        let settings = DeliverySettings::default();
        WebhookDeliveryConfig {
            timeout_ms: settings.timeout.as_millis() as u64,
            max_attempts: settings.max_attempts,
            initial_backoff_ms: settings.initial_backoff.as_millis() as u64,
            max_backoff_ms: settings.max_backoff.as_millis() as u64,
            proxy: String::new(),
        }
    }
}

impl WebhookDeliveryConfig {
    /// The sender's settings; a proxy that is not an http(s) URL is refused, naming the key.
    pub fn settings(&self) -> Result<DeliverySettings, Invalid> {
        let proxy = match self.proxy.trim() {
            "" => None,
            // Whether it may be private is each webhook's to say; this reads it.
            proxy => Some(
                super::target::check_proxy(proxy, true)
                    .map_err(|err| invalid("webhook_delivery.proxy", err.to_string()))?,
            ),
        };
        Ok(DeliverySettings {
            timeout: Duration::from_millis(self.timeout_ms),
            max_attempts: self.max_attempts,
            initial_backoff: Duration::from_millis(self.initial_backoff_ms),
            max_backoff: Duration::from_millis(self.max_backoff_ms),
            proxy,
        })
    }
}

/// The webhooks of `entries`, delivered as `delivery` says, checked: each URL, each secret
/// (from the file or, by `secret_env`, from `env`), each event type. With `checking` (only the
/// file), a variable `env` does not know is let through. An error names the key.
pub fn webhooks(
    entries: &[WebhookConfig],
    delivery: &WebhookDeliveryConfig,
    env: impl Fn(&str) -> Option<String>,
    checking: bool,
) -> Result<Webhooks, Invalid> {
    let settings = delivery.settings()?;
    let mut hooks = Vec::new();
    for (index, hook) in entries.iter().enumerate() {
        let key = |field: &str| format!("webhooks[{index}].{field}");
        // The proxy is where this webhook's client connects: checked as its URL is.
        if let Some(proxy) = &settings.proxy {
            super::target::check_proxy(proxy.as_str(), hook.allow_private).map_err(|err| {
                invalid(
                    "webhook_delivery.proxy",
                    format!("{err} (webhooks[{index}] posts through it)"),
                )
            })?;
        }
        let secret = match (&hook.secret, &hook.secret_env) {
            (Some(secret), None) => secret.clone(),
            (None, Some(name)) => match env(name) {
                Some(secret) => secret,
                None if checking => continue,
                None => {
                    return Err(invalid(
                        key("secret_env"),
                        format!("the environment variable {name} is not set"),
                    ));
                }
            },
            _ => {
                return Err(invalid(
                    key("secret"),
                    "set exactly one of `secret` and `secret_env`",
                ));
            }
        };
        let secret =
            parse_secret(&secret).map_err(|err| invalid(key("secret"), err.to_string()))?;
        if let Some(kind) = hook
            .events
            .iter()
            .flatten()
            .find(|kind| !crate::store::is_feed_type(kind))
        {
            return Err(invalid(
                key("events"),
                format!(
                    "unknown event type `{kind}`; the types are {}",
                    crate::store::feed_types()
                ),
            ));
        }
        let webhook = Webhook::new(
            &hook.url,
            secret,
            hook.events.clone().map(|e| e.into_iter().collect()),
            hook.tools.clone().map(|t| t.into_iter().collect()),
            hook.allow_private,
            &settings,
        )
        .map_err(|err| invalid(key("url"), err.to_string()))?;
        hooks.push(webhook);
    }
    for (key, value) in [
        ("webhook_delivery.timeout_ms", delivery.timeout_ms),
        (
            "webhook_delivery.max_attempts",
            u64::from(delivery.max_attempts),
        ),
    ] {
        if value == 0 {
            return Err(invalid(key, "must be at least 1"));
        }
    }
    Ok(Webhooks::new(hooks, settings))
}
