//! The webhook outbox's types: a delivery to create, a delivery as stored and listed, where it
//! stands, and how an attempt ended, as [`OutboxStore`](super::OutboxStore) takes and answers
//! them.

use serde::Serialize;

use super::Timestamp;

/// A webhook delivery to create: one message for one webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    /// The webhook, by its URL (its identity in the store).
    pub webhook: String,
    /// The message id, the same on every attempt (`webhook-id`).
    pub message_id: String,
    /// The feed entry type it carries (`call.suspended`, ...).
    pub kind: String,
    /// The call it is about; empty for an entry of an upstream's tool.
    pub call_id: String,
    /// The request body, exactly as it is signed and sent on every attempt.
    pub body: String,
    /// The notification channel (`[[notify]] name`) it goes through; `None`: a webhook's.
    pub channel: Option<String>,
    /// Whom a channel's delivery reaches (an email address, a Slack user or channel id).
    pub recipient: Option<String>,
}

/// Where a delivery stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not delivered yet; it will be (again) at `next_attempt_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Given up: attempts ran out, the receiver refused it for good, or the webhook is
    /// disabled. An admin may send it again.
    Failed,
}

impl DeliveryStatus {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    /// The status named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => DeliveryStatus::Pending,
            "delivered" => DeliveryStatus::Delivered,
            "failed" => DeliveryStatus::Failed,
            _ => return None,
        })
    }
}

/// A webhook delivery, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    /// Its id.
    pub id: i64,
    /// The webhook's URL (empty, and not shown, for a notification channel's).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub webhook: String,
    /// The message id (`webhook-id`), the same on every attempt.
    pub message_id: String,
    /// The feed entry type it carries.
    #[serde(rename = "type")]
    pub kind: String,
    /// The call it is about (empty, and not shown, for an entry of an upstream's tool).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub call_id: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempts: u32,
    /// The HTTP status of the last attempt, when the receiver answered.
    pub last_status: Option<u16>,
    /// Why the last attempt failed, when it did.
    pub last_error: Option<String>,
    /// When it is tried next, while pending.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_attempt_at: Option<Timestamp>,
    /// When it was created.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// The request body (not shown in lists).
    #[serde(skip)]
    pub body: String,
    /// The notification channel it goes through; `None` (not shown): a webhook's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Whom a channel's delivery reaches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// What the channel answered once it was sent (JSON; Slack: the message's channel and
    /// `ts`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

/// How an attempt to deliver ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryResult {
    /// The receiver answered 2xx with this status.
    Delivered {
        /// The HTTP status (a channel's: its own code, such as SMTP's `250`).
        status: u16,
        /// What a channel keeps of its answer (see [`Delivery::receipt`]).
        receipt: Option<String>,
    },
    /// Try again at `at`.
    Retry {
        /// When.
        at: Timestamp,
        /// The receiver's status, when it answered.
        status: Option<u16>,
        /// Why it failed.
        error: String,
    },
    /// Give up.
    Failed {
        /// The receiver's status, when it answered.
        status: Option<u16>,
        /// Why.
        error: String,
    },
}

/// A page of deliveries, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryPage {
    /// The deliveries.
    pub deliveries: Vec<Delivery>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<i64>,
}
