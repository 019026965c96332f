//! The sender loop: claims due deliveries for a lease, posts them signed, and records what the
//! receiver answered.
//!
//! The lease is what makes delivery at-least-once across replicas: a sender killed mid-post
//! records nothing, its lease runs out, and another claims the delivery again. The outcome of
//! an attempt: 2xx delivered; `410 Gone` disables the webhook; 429 and 503 are retried after
//! their `Retry-After`; anything else is retried with exponential backoff and jitter until
//! `max_attempts`. A notification channel's delivery is handed to the channels
//! (`crate::feed::channels`), whose answer is retried the same way.

use std::sync::Mutex;
use std::time::Duration;

use tracing::Instrument as _;

use super::{DeliverySettings, IDLE, Loop, Shared, pause, signature};
use crate::feed::channels::Sent;
use crate::store::{Delivery, DeliveryResult, Timestamp};
use crate::telemetry::spans;

/// Deliveries the sender claims at a time (and sends at once).
const CLAIM: u32 = 16;

/// The sender loop: claims due deliveries and posts them.
pub(super) async fn sender(mut run: Loop) {
    if let Ok(disabled) = run.store.disabled_webhooks().await {
        lock(&run.shared.disabled).extend(disabled);
    }
    // Long enough for one attempt; a claim whose sender died is claimable again after it.
    let lease = run.shared.settings.timeout + Duration::from_secs(5);
    loop {
        if *run.released.borrow() {
            return;
        }
        let claimed = match run.store.claim_deliveries(CLAIM, lease).await {
            Ok(claimed) => claimed,
            Err(err) => {
                tracing::debug!(error = %err, "cannot claim webhook deliveries now");
                Vec::new()
            }
        };
        if claimed.is_empty() {
            if !pause(&mut run.released, IDLE, run.nudge.0.notified()).await {
                return;
            }
            continue;
        }
        let sends = claimed.into_iter().map(|delivery| {
            let store = run.store.clone();
            let shared = run.shared.clone();
            async move {
                if let Some(channel) = delivery.channel.clone() {
                    let result = channel_attempt(&shared, &delivery).await;
                    crate::metrics::notification(&channel, outcome(&result));
                    if let Err(err) = store.settle_delivery(delivery.id, result).await {
                        // The lease runs out and it is sent again: at least once.
                        tracing::warn!(error = %err, delivery = delivery.id, "cannot record a notification");
                    }
                    return;
                }
                let span = if crate::telemetry::enabled() {
                    // The call's span, to link the delivery to: one read, only with traces on.
                    let call = store.call(&delivery.call_id).await.ok().flatten();
                    spans::webhook_attempt(
                        &delivery.webhook,
                        delivery.attempts + 1,
                        call.and_then(|call| call.traceparent).as_deref(),
                    )
                } else {
                    tracing::Span::none()
                };
                let result = attempt(&shared, &delivery, &span).await;
                if !span.is_none() {
                    match &result {
                        DeliveryResult::Delivered { status, .. } => {
                            spans::webhook_answered(&span, Some(*status), true);
                        }
                        DeliveryResult::Retry { status, .. }
                        | DeliveryResult::Failed { status, .. } => {
                            spans::webhook_answered(&span, *status, false);
                        }
                    }
                }
                crate::metrics::webhook_delivery(outcome(&result));
                if let Err(err) = store.settle_delivery(delivery.id, result).await {
                    // The lease runs out and it is sent again: at least once.
                    tracing::warn!(error = %err, delivery = delivery.id, "cannot record a webhook delivery");
                }
            }
        });
        futures_util::future::join_all(sends).await;
    }
}

/// What an attempt came to, as the metrics count it.
fn outcome(result: &DeliveryResult) -> &'static str {
    match result {
        DeliveryResult::Delivered { .. } => "delivered",
        DeliveryResult::Retry { .. } => "retried",
        DeliveryResult::Failed { .. } => "failed",
    }
}

/// One attempt of a notification channel's `delivery`, handed to the channels, and what it
/// amounts to.
async fn channel_attempt(shared: &Shared, delivery: &Delivery) -> DeliveryResult {
    let Some(channels) = &shared.channels else {
        return DeliveryResult::Failed {
            status: None,
            error: "no notification channel is configured".into(),
        };
    };
    // Within the attempt's time, so the sender's lease outlives it: never sent twice at once.
    let timeout = shared.settings.timeout;
    let sent = tokio::time::timeout(timeout, channels.send(delivery))
        .await
        .unwrap_or_else(|_| Sent::Retry {
            status: None,
            error: format!("no answer within {} ms", timeout.as_millis()),
            after: None,
        });
    match sent {
        Sent::Delivered { status, receipt } => DeliveryResult::Delivered { status, receipt },
        Sent::Retry {
            status,
            error,
            after,
        } => again(&shared.settings, delivery.attempts, status, error, after),
        Sent::Failed { status, error } => DeliveryResult::Failed { status, error },
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One attempt of `delivery`, and what it amounts to.
async fn attempt(shared: &Shared, delivery: &Delivery, span: &tracing::Span) -> DeliveryResult {
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
        .headers(spans::headers_of(span))
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
        .instrument(span.clone())
        .await;
    let settings = &shared.settings;
    match response {
        Ok(response) if response.status().is_success() => DeliveryResult::Delivered {
            status: response.status().as_u16(),
            receipt: None,
        },
        Ok(response) if response.status() == reqwest::StatusCode::GONE => {
            lock(&shared.disabled).insert(delivery.webhook.clone());
            tracing::warn!(
                webhook = %super::target::shown(&delivery.webhook),
                "a webhook's receiver answered 410 Gone: the webhook is disabled"
            );
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
