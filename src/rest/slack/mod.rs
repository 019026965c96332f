//! `POST /integrations/slack/interactions`: the door Slack calls when a person presses a
//! button of toolgate's messages (see `crate::notify::slack::blocks`).
//!
//! Slack sends no key: each request is signed with the Slack app's signing secret
//! ([`signature`]), checked over the raw body before anything of it is read; a request that
//! does not verify is `401 bad_signature` and decides nothing. A verified `block_actions`
//! payload names the Slack user who pressed the button, which `[[people]]` maps to a person,
//! and the approval's token; the door decides as that person's principal through the
//! lifecycle (`Dispatcher::approve` with the empty answer, `Dispatcher::reject`), exactly as
//! the REST API's approvals do, so every rule holds here too: who may decide which tool, the
//! four-eyes rule, at most one decision (a replayed request finds the approval decided).
//!
//! What came of it is told to the person in Slack, as a reply only they see, posted to the
//! payload's `response_url` ([`decide`] words it), and only where that URL is Slack's
//! (`https://hooks.slack.com`) or the configured Web API's origin: a signed payload is still
//! not trusted to send toolgate to any other host. Slack wants its answer within three
//! seconds: the door answers `200` once the decision and its reply are done, or after
//! [`ACK_WITHIN`], whichever comes first, and the rest goes on without the request.

mod decide;
mod signature;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde::Deserialize;
use serde_json::json;

use super::RestState;
use super::error_responses::SignatureRefused;
use crate::dispatch::Dispatcher;
use crate::http::auth::Access;
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::gate::Gates;
use crate::notify::People;
use crate::notify::slack::blocks;

/// The route's path.
pub const PATH: &str = "/integrations/slack/interactions";
/// The largest body taken (Slack's payloads carry the message they came from: tens of KB).
const MAX_BODY: usize = 256 * 1024;
/// How long Slack's request waits for the decision before it is answered anyway.
const ACK_WITHIN: Duration = Duration::from_millis(2500);
/// How long a reply to Slack's `response_url` may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// The origin of the URLs Slack gives to reply to.
const SLACK_HOOKS: &str = "https://hooks.slack.com";

/// What the door needs from the configuration: the Slack apps whose requests it accepts (each
/// a signing secret, and its Web API's URL), the people Slack users are, and where the inbox
/// is for the links it replies with. With no app, every request is `401 bad_signature`.
#[derive(Clone, Default)]
pub struct SlackInteractions {
    secrets: Vec<Vec<u8>>,
    origins: Vec<url::Origin>,
    people: Arc<People>,
    inbox_base: String,
}

impl std::fmt::Debug for SlackInteractions {
    // The secrets are never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackInteractions")
            .field("apps", &self.secrets.len())
            .field("inbox_base", &self.inbox_base)
            .finish_non_exhaustive()
    }
}

impl SlackInteractions {
    /// No Slack app: the door verifies nothing, so it refuses everything.
    pub fn none() -> Self {
        SlackInteractions::default()
    }

    /// The door for `people`, replying with links to the inbox under `inbox_base` (`[inbox]
    /// public_url`, e.g. `https://tools.example.com`).
    pub fn new(people: Arc<People>, inbox_base: &str) -> Self {
        SlackInteractions {
            people,
            inbox_base: inbox_base.trim_end_matches('/').to_owned(),
            ..SlackInteractions::default()
        }
    }

    /// Accepts the requests of one more Slack app: signed with `signing_secret`, its Web API
    /// at `api_url` (`https://slack.com/api`, or a stand-in), whose origin its replies may
    /// also be posted to.
    pub fn app(mut self, signing_secret: &[u8], api_url: &str) -> Result<Self, String> {
        if signing_secret.is_empty() {
            return Err("the signing secret is empty".into());
        }
        let api = url::Url::parse(api_url).map_err(|err| format!("`{api_url}`: {err}"))?;
        self.secrets.push(signing_secret.to_vec());
        if !self.origins.contains(&api.origin()) {
            self.origins.push(api.origin());
        }
        Ok(self)
    }

    /// Whether any app is configured.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

/// The door's state: its configuration, the lifecycle, and the client its replies go out by.
#[derive(Clone)]
pub(super) struct SlackDoor(Arc<Door>);

pub(super) struct Door {
    config: SlackInteractions,
    dispatcher: Dispatcher,
    client: Option<reqwest::Client>,
}

impl SlackDoor {
    fn new(config: SlackInteractions, dispatcher: Dispatcher) -> Self {
        crate::base::install_crypto();
        // No redirect (it could lead anywhere), no proxy from the environment.
        let client = reqwest::Client::builder()
            .timeout(REPLY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .inspect_err(|err| tracing::error!(error = %err, "no HTTP client for Slack replies"))
            .ok();
        SlackDoor(Arc::new(Door {
            config,
            dispatcher,
            client,
        }))
    }
}

/// The route, with the gate of a signed door (the `Host` check and the request limit; no key).
pub(super) fn router(
    config: SlackInteractions,
    dispatcher: Dispatcher,
    gates: &Gates,
) -> Router<RestState> {
    Router::new()
        .route(
            PATH,
            post(interactions).route_layer(gates.route(Access::Signed)),
        )
        .with_state(SlackDoor::new(config, dispatcher))
}

/// What Slack posts, as far as the door reads it.
#[derive(Deserialize)]
struct Payload {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    user: Option<SlackUser>,
    #[serde(default)]
    actions: Vec<Action>,
    #[serde(default)]
    response_url: Option<String>,
}

#[derive(Deserialize)]
struct SlackUser {
    id: String,
}

#[derive(Deserialize)]
struct Action {
    action_id: String,
    #[serde(default)]
    value: Option<String>,
}

/// Slack's request when a person presses a button: verified, then decided as that person.
#[utoipa::path(
    post, path = "/integrations/slack/interactions", tag = "integrations",
    operation_id = "slackInteractions",
    request_body(
        content_type = "application/x-www-form-urlencoded",
        description = "Slack's interaction payload, `payload=<JSON>`, signed with the Slack \
                       app's signing secret (`X-Slack-Signature`, `X-Slack-Request-Timestamp`).",
        content = String,
    ),
    params(
        ("X-Slack-Signature" = String, Header, description = "`v0=` and the hex of HMAC-SHA256(signing secret, `v0:{timestamp}:{raw body}`)."),
        ("X-Slack-Request-Timestamp" = String, Header, description = "Unix seconds; within five minutes of the server's clock."),
    ),
    responses(
        (status = 200, description = "Verified and handled: what came of it (decided, or refused and why) is posted to the payload's `response_url`, for the person only."),
        (status = 400, description = "`bad_request`: a verified body with no `payload` that Slack would send.", body = ErrorEnvelope),
        SignatureRefused,
        (status = 403, description = "`forbidden`: a `Host` that is not allowed.", body = ErrorEnvelope),
        (status = 413, description = "`payload_too_large`: the body is over the limit.", body = ErrorEnvelope),
        (status = 503, description = "`overloaded`: the server is at its limit of requests at once; retry later.", body = ErrorEnvelope),
    )
)]
pub(super) async fn interactions(
    State(door): State<SlackDoor>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::PayloadTooLarge(format!(
            "A Slack interaction is at most {MAX_BODY} bytes."
        )));
    }
    let now = crate::store::Timestamp::now().0.div_euclid(1000);
    signature::verify(&door.0.config.secrets, &headers, &body, now)?;
    let payload = url::form_urlencoded::parse(&body)
        .find(|(name, _)| name == "payload")
        .ok_or_else(|| ApiError::BadRequest("The body has no `payload`.".into()))?;
    let payload: Payload = serde_json::from_str(&payload.1)
        .map_err(|err| ApiError::BadRequest(format!("`payload` is not Slack's JSON: {err}")))?;
    if payload.kind != "block_actions" {
        return Ok(StatusCode::OK);
    }
    let Some(user) = payload.user else {
        return Err(ApiError::BadRequest("`payload` names no `user`.".into()));
    };
    let decisions: Vec<(decide::Press, String)> = payload
        .actions
        .into_iter()
        .filter_map(|action| {
            let press = match action.action_id.as_str() {
                blocks::APPROVE => decide::Press::Approve,
                blocks::REJECT => decide::Press::Reject,
                // The inbox's link button, or an action of someone else's.
                _ => return None,
            };
            Some((press, action.value.unwrap_or_default()))
        })
        .collect();
    if decisions.is_empty() {
        return Ok(StatusCode::OK);
    }
    let response_url = payload.response_url;
    let work = tokio::spawn(async move {
        for (press, token) in decisions {
            let said = door.decide(&user.id, press, &token).await;
            door.reply(response_url.as_deref(), &said).await;
        }
    });
    // Answered within Slack's three seconds; the decision goes on regardless.
    let _ = tokio::time::timeout(ACK_WITHIN, work).await;
    Ok(StatusCode::OK)
}

impl SlackDoor {
    /// Posts `text` to the person who pressed, as a reply only they see, where `response_url`
    /// is Slack's (or the configured Web API's origin); anywhere else, nothing is sent.
    async fn reply(&self, response_url: Option<&str>, text: &str) {
        let Some(url) = response_url.and_then(|url| url::Url::parse(url).ok()) else {
            tracing::debug!("a Slack interaction without a response_url: no reply");
            return;
        };
        let slack = url::Url::parse(SLACK_HOOKS).map(|hooks| hooks.origin());
        let origin = url.origin();
        if slack.as_ref() != Ok(&origin) && !self.0.config.origins.contains(&origin) {
            tracing::warn!(
                origin = %origin.ascii_serialization(),
                "a Slack interaction's response_url is not Slack's: no reply sent there"
            );
            return;
        }
        let Some(client) = &self.0.client else { return };
        let body = json!({
            "response_type": "ephemeral",
            "replace_original": false,
            "text": text,
        });
        let sent = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await;
        match sent {
            Ok(answer) if answer.status().is_success() => {}
            Ok(answer) => {
                tracing::warn!(status = %answer.status(), "Slack refused the reply to an interaction");
            }
            Err(err) => tracing::warn!(error = %err, "cannot reply to a Slack interaction"),
        }
    }
}
