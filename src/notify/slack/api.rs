//! Slack's Web API, as a channel uses it: `chat.postMessage` to a person (a direct message:
//! the channel is their user id) or a channel, and `chat.update` of a posted message once its
//! approval is decided. The bot token goes as `Authorization: Bearer`; `api_url` is
//! configurable (tests point it at a stand-in).
//!
//! Slack answers most failures with HTTP 200 and `{"ok": false, "error": ...}`: `ratelimited`
//! (or HTTP 429, with `Retry-After`) and Slack's own troubles are retried, any other error
//! (`invalid_auth`, `channel_not_found`, ...) is a refusal for good; a request that gets no
//! answer is retried.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::blocks;
use crate::feed::channels::Sent;
use crate::notify::message::{Decided, MessageFacts};

/// How long one request to Slack may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Slack's errors worth trying again.
const TRANSIENT: [&str; 5] = [
    "ratelimited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

/// A posted message: what `chat.update` needs to edit it (a delivery's receipt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posted {
    /// The conversation it is in (a DM's id for a user).
    pub channel: String,
    /// Its timestamp, Slack's id of a message.
    pub ts: String,
}

/// A Slack channel's client: where its API is, its token, the signing secret its door checks,
/// and the channel it also posts to.
pub struct SlackApi {
    client: reqwest::Client,
    api_url: String,
    token: String,
    signing_secret: Option<String>,
    channel: Option<String>,
}

impl SlackApi {
    /// A client of the Web API at `api_url` with the bot `token`.
    pub(crate) fn new(
        api_url: &str,
        token: String,
        signing_secret: Option<String>,
        channel: Option<String>,
    ) -> Result<Self, String> {
        let parsed = url::Url::parse(api_url).map_err(|err| format!("`{api_url}`: {err}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("`{api_url}` is not an http(s) URL"));
        }
        let client = crate::base::bounded_client(TIMEOUT)?;
        Ok(SlackApi {
            client,
            api_url: api_url.trim_end_matches('/').to_owned(),
            token,
            signing_secret,
            channel,
        })
    }

    /// The channel also posted to, if any.
    pub(crate) fn channel(&self) -> Option<&str> {
        self.channel.as_deref()
    }

    /// The Web API's URL (`https://slack.com/api`, or a stand-in).
    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The app's signing secret, which Slack's requests to the interactions door are signed
    /// with.
    pub fn signing_secret(&self) -> Option<&str> {
        self.signing_secret.as_deref()
    }

    /// Posts `facts`' message to `to` (a user id: a direct message; or a channel id). The
    /// receipt is the posted message ([`Posted`]).
    pub(crate) async fn post(&self, facts: &MessageFacts, to: &str) -> Sent {
        let mut body = blocks::message(facts);
        body["channel"] = Value::String(to.to_owned());
        self.call("chat.postMessage", &body).await
    }

    /// Edits the `posted` message of `facts` to say how it was `decided`.
    pub(crate) async fn update(
        &self,
        posted: &Posted,
        facts: &MessageFacts,
        decided: &Decided,
    ) -> Sent {
        let mut body = blocks::decided(facts, decided);
        body["channel"] = Value::String(posted.channel.clone());
        body["ts"] = Value::String(posted.ts.clone());
        self.call("chat.update", &body).await
    }

    /// One call of the Web API `method` with `body`, and what it amounts to.
    async fn call(&self, method: &str, body: &Value) -> Sent {
        let response = self
            .client
            .post(format!("{}/{method}", self.api_url))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await;
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                let error = if err.is_timeout() {
                    format!("Slack did not answer within {} s", TIMEOUT.as_secs())
                } else {
                    "cannot reach Slack's API".to_owned()
                };
                return Sent::Retry {
                    status: None,
                    error,
                    after: None,
                };
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        if status == 429 || response.status().is_server_error() {
            return Sent::Retry {
                status: Some(status),
                error: format!("Slack answered {status}"),
                after: retry_after,
            };
        }
        let answer: Value = match response.json().await {
            Ok(answer) => answer,
            Err(_) => {
                return Sent::Retry {
                    status: Some(status),
                    error: format!("Slack answered {status} without JSON"),
                    after: None,
                };
            }
        };
        if answer.get("ok") == Some(&Value::Bool(true)) {
            let posted = Posted {
                channel: text(&answer, "channel"),
                ts: text(&answer, "ts"),
            };
            return Sent::Delivered {
                status,
                receipt: serde_json::to_string(&posted).ok(),
            };
        }
        let error = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown_error");
        let error: String = error
            .chars()
            .take(100)
            .filter(|c| c.is_ascii_graphic())
            .collect();
        if TRANSIENT.contains(&error.as_str()) {
            Sent::Retry {
                status: Some(status),
                error: format!("Slack: {error}"),
                after: retry_after,
            }
        } else {
            Sent::Failed {
                status: Some(status),
                error: format!("Slack refused it: {error}"),
            }
        }
    }
}

fn text(answer: &Value, key: &str) -> String {
    answer
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
