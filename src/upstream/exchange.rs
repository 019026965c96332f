//! Acting as the caller upstream: the caller's access token exchanged at its issuer's token
//! endpoint (OAuth 2.0 Token Exchange, RFC 8693) for a token meant for the upstream, and sent
//! as that one call's bearer.
//!
//! - The exchanged token is cached per subject (the upstream's audience is fixed) until shortly
//!   before it expires; one without a lifetime is used once.
//! - A call that waits for a person is exchanged for before the wait, while the caller's token
//!   is valid ([`Exchanger::hold`]); what came back is kept in this process's memory (never in
//!   the store), by call, and at the approval the token is used if still valid, else its
//!   `refresh_token` is redeemed. Nothing of the kind: `upstream_credentials_expired`, nothing
//!   sent, never the static header or another caller's token. What was held is forgotten once
//!   the upstream answered the call (or its caller's own request runs it).
//! - Every request to the issuer is bounded in time ([`TIMEOUT`]) and size ([`MAX_ANSWER_BYTES`]),
//!   follows no redirect, and no token is logged: only the issuer's error code and description.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::OnceCell;

use super::config::{ClientAuth, ExchangeSettings};
use crate::base::CallerToken;
use crate::contract::ctx::ToolCtx;
use crate::contract::error::{CredentialProblem, ToolError, Unavailable};

/// The longest one request to the issuer may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from the issuer.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// A cached token is not used in its last this many seconds: it must outlast the request.
const MARGIN: Duration = Duration::from_secs(30);
/// The most subjects cached, and the most calls' credentials held for their approval.
const MAX_ENTRIES: usize = 10_000;
/// The longest credentials are held for an approval: past it, the approval finds them gone.
const HELD_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest part of an issuer's error description repeated to the caller.
const MAX_DESCRIPTION_CHARS: usize = 300;

const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// A token meant for the upstream, with what lasts past it.
#[derive(Clone)]
struct Exchanged {
    access: String,
    expires: Option<Instant>,
    refresh: Option<String>,
}

impl Exchanged {
    fn fresh(&self, now: Instant) -> bool {
        self.expires.is_some_and(|expires| expires > now + MARGIN)
    }
}

/// One upstream's exchanges.
pub(super) struct Exchanger {
    upstream: String,
    settings: ExchangeSettings,
    client: reqwest::Client,
    token_url: OnceCell<url::Url>,
    /// By subject.
    cache: Mutex<HashMap<String, Exchanged>>,
    /// By call id: for an approval, with when it was kept.
    held: Mutex<HashMap<String, (Exchanged, Instant)>>,
}

/// What the issuer answered.
#[derive(Deserialize)]
struct Answer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
}

/// An issuer's refusal (RFC 6749 5.2).
#[derive(Deserialize)]
struct Refusal {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

impl Exchanger {
    pub(super) fn new(upstream: &str, settings: ExchangeSettings) -> Result<Exchanger, String> {
        let client = crate::base::bounded_client(TIMEOUT)?;
        Ok(Exchanger {
            upstream: upstream.to_owned(),
            settings,
            client,
            token_url: OnceCell::new(),
            cache: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// The bearer this attempt of `tool` sends: the caller's token exchanged (cached), or, on
    /// an approver's request, what was held for the call before the wait.
    pub(super) async fn bearer(&self, tool: &str, ctx: &ToolCtx) -> Result<String, ToolError> {
        let now = Instant::now();
        if let Some(caller) = ctx.caller() {
            self.check_issuer(tool, caller)?;
            // The caller's own request runs the call: nothing held for it is needed any more.
            self.release(ctx.call_id());
            let cached = lock(&self.cache).get(caller.subject()).cloned();
            if let Some(cached) = cached.filter(|cached| cached.fresh(now)) {
                return Ok(cached.access);
            }
            let exchanged = self.exchange(tool, caller).await?;
            self.cache(caller.subject(), &exchanged, now);
            return Ok(exchanged.access);
        }
        let held = lock(&self.held).get(ctx.call_id()).cloned();
        if let Some((held, kept)) = held {
            if held.fresh(now) {
                return Ok(held.access);
            }
            if let Some(refresh) = &held.refresh {
                let mut refreshed = self.refresh(tool, refresh).await?;
                // An issuer that does not rotate refresh tokens answers none: the held one stays.
                refreshed.refresh = refreshed.refresh.or_else(|| held.refresh.clone());
                let access = refreshed.access.clone();
                lock(&self.held).insert(ctx.call_id().to_owned(), (refreshed, kept));
                return Ok(access);
            }
            return Err(self.expired(
                tool,
                "the token exchanged for its caller before the approval expired, and the issuer \
                 gave nothing to renew it with (no refresh_token)",
            ));
        }
        if ctx.resume().is_some() {
            return Err(self.expired(
                tool,
                "nothing of its caller's credentials is kept for this call (they are kept in \
                 the memory of the toolgate process that suspended it, for 7 days at most)",
            ));
        }
        Err(credentials(
            tool,
            CredentialProblem::Missing,
            format!(
                "The upstream `{}` acts as each caller, and this caller has no identity \
                 provider's token to act with (an API key, or a person signed in to the inbox).",
                self.upstream
            ),
        ))
    }

    /// Before a call waits for a person: exchanges the caller's token now, while it is valid,
    /// and keeps what comes back (the token, and a `refresh_token` if the issuer gives one)
    /// for the approval.
    pub(super) async fn hold(&self, tool: &str, ctx: &ToolCtx) -> Result<(), ToolError> {
        let Some(caller) = ctx.caller() else {
            // The same refusal as at the attempt: nobody is asked to approve a call that
            // cannot run.
            return self.bearer(tool, ctx).await.map(drop);
        };
        self.check_issuer(tool, caller)?;
        let exchanged = self.exchange(tool, caller).await?;
        let now = Instant::now();
        self.cache(caller.subject(), &exchanged, now);
        let mut held = lock(&self.held);
        held.retain(|_, (_, kept)| now.duration_since(*kept) < HELD_FOR);
        if held.len() >= MAX_ENTRIES {
            // The oldest gives way: its approval will find its credentials gone.
            if let Some(oldest) = held
                .iter()
                .min_by_key(|(_, (_, kept))| *kept)
                .map(|(id, _)| id.clone())
            {
                held.remove(&oldest);
            }
        }
        held.insert(ctx.call_id().to_owned(), (exchanged, now));
        Ok(())
    }

    /// Forgets what was held for `call_id` (the upstream answered it, or its caller runs it).
    pub(super) fn release(&self, call_id: &str) {
        lock(&self.held).remove(call_id);
    }

    fn check_issuer(&self, tool: &str, caller: &CallerToken) -> Result<(), ToolError> {
        if caller.issuer() == self.settings.issuer {
            return Ok(());
        }
        Err(credentials(
            tool,
            CredentialProblem::Missing,
            format!(
                "The upstream `{}` acts as each caller with tokens of the issuer `{}`; this \
                 caller's token is from `{}`.",
                self.upstream,
                self.settings.issuer,
                caller.issuer()
            ),
        ))
    }

    fn cache(&self, subject: &str, exchanged: &Exchanged, now: Instant) {
        if !exchanged.fresh(now) {
            return;
        }
        let mut cache = lock(&self.cache);
        if cache.len() >= MAX_ENTRIES {
            cache.retain(|_, cached| cached.fresh(now));
        }
        if cache.len() < MAX_ENTRIES {
            let kept = Exchanged {
                refresh: None,
                ..exchanged.clone()
            };
            cache.insert(subject.to_owned(), kept);
        }
    }

    fn expired(&self, tool: &str, why: &str) -> ToolError {
        credentials(
            tool,
            CredentialProblem::Expired,
            format!(
                "The upstream `{}` acts as each caller, and {why}. Nothing was sent; the caller \
                 may call again.",
                self.upstream
            ),
        )
    }

    /// The caller's token exchanged for one meant for the upstream.
    async fn exchange(&self, tool: &str, caller: &CallerToken) -> Result<Exchanged, ToolError> {
        let mut form = vec![
            ("grant_type", GRANT),
            ("subject_token", caller.secret()),
            ("subject_token_type", ACCESS_TOKEN),
            ("requested_token_type", ACCESS_TOKEN),
            ("audience", &self.settings.audience),
        ];
        if let Some(scope) = &self.settings.scope {
            form.push(("scope", scope));
        }
        self.post(tool, form, CredentialProblem::Refused).await
    }

    /// A held `refresh_token` redeemed: refused, the credentials expired.
    async fn refresh(&self, tool: &str, refresh: &str) -> Result<Exchanged, ToolError> {
        let mut form = vec![("grant_type", "refresh_token"), ("refresh_token", refresh)];
        if let Some(scope) = &self.settings.scope {
            form.push(("scope", scope));
        }
        self.post(tool, form, CredentialProblem::Expired).await
    }

    /// POSTs `form` to the token endpoint as toolgate's client; a refusal is `refused`.
    async fn post(
        &self,
        tool: &str,
        mut form: Vec<(&str, &str)>,
        refused: CredentialProblem,
    ) -> Result<Exchanged, ToolError> {
        let url = self.token_url(tool).await?;
        let settings = &self.settings;
        let basic = match settings.client_auth {
            ClientAuth::ClientSecretBasic => {
                Some((settings.client_id.as_str(), settings.client_secret.as_str()))
            }
            ClientAuth::ClientSecretPost => {
                form.push(("client_id", &settings.client_id));
                form.push(("client_secret", &settings.client_secret));
                None
            }
        };
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let sent = crate::base::form_post(&self.client, url.clone(), basic, body)
            .send()
            .await;
        let (status, body) = match sent {
            Ok(response) => {
                let status = response.status();
                match crate::base::read_bounded(response, MAX_ANSWER_BYTES).await {
                    Ok(body) => (status, body),
                    Err(why) => return Err(self.unreachable(tool, &why)),
                }
            }
            Err(err) => return Err(self.unreachable(tool, &without_url(&err))),
        };
        if status.is_success() {
            let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
                self.unreachable(tool, "its answer is not a token response (RFC 6749 5.1)")
            })?;
            if answer.access_token.is_empty()
                || answer
                    .token_type
                    .as_deref()
                    .is_some_and(|kind| !kind.eq_ignore_ascii_case("bearer"))
            {
                return Err(credentials(
                    tool,
                    refused,
                    format!(
                        "The issuer `{}` answered the exchange for upstream `{}` with no bearer \
                         token.",
                        settings.issuer, self.upstream
                    ),
                ));
            }
            let now = Instant::now();
            return Ok(Exchanged {
                access: answer.access_token,
                expires: answer
                    .expires_in
                    .map(|seconds| now + Duration::from_secs(seconds.min(86_400 * 365))),
                refresh: answer.refresh_token.filter(|token| !token.is_empty()),
            });
        }
        if status.is_server_error() {
            return Err(self.unreachable(tool, &format!("it answered {status}")));
        }
        let (code, description) = match serde_json::from_slice::<Refusal>(&body) {
            Ok(refusal) => (
                shown(&refusal.error, 64),
                refusal
                    .error_description
                    .map(|text| shown(&text, MAX_DESCRIPTION_CHARS)),
            ),
            Err(_) => (status.as_u16().to_string(), None),
        };
        tracing::warn!(
            upstream = %self.upstream,
            issuer = %settings.issuer,
            error = %code,
            "the issuer refused a token exchange"
        );
        let said = description.map(|d| format!(": {d}")).unwrap_or_default();
        Err(credentials(
            tool,
            refused,
            format!(
                "The issuer `{}` refused to exchange the caller's token for upstream `{}` \
                 ({code}{said}). Nothing was sent upstream.",
                settings.issuer, self.upstream
            ),
        ))
    }

    /// The token endpoint: configured, or from the issuer's discovery document (read once).
    async fn token_url(&self, tool: &str) -> Result<&url::Url, ToolError> {
        if let Some(url) = &self.settings.token_url {
            return Ok(url);
        }
        self.token_url
            .get_or_try_init(|| self.discover())
            .await
            .map_err(|why| self.unreachable(tool, &why))
    }

    /// The token endpoint of the issuer's discovery document (which must name the issuer).
    async fn discover(&self) -> Result<url::Url, String> {
        let issuer = self
            .settings
            .issuer_url
            .as_deref()
            .ok_or("its issuer's URL is not known")?;
        let document =
            crate::base::discovery_document(&self.client, issuer, MAX_ANSWER_BYTES).await?;
        let endpoint = document
            .get("token_endpoint")
            .and_then(serde_json::Value::as_str)
            .ok_or("its discovery document names no token_endpoint")?;
        crate::base::secure_url(endpoint)
            .map_err(|why| format!("its discovery document's token_endpoint {why}"))
    }

    fn unreachable(&self, tool: &str, why: &str) -> ToolError {
        tracing::warn!(
            upstream = %self.upstream,
            issuer = %self.settings.issuer,
            error = why,
            "the issuer's token endpoint cannot be used now"
        );
        ToolError::Unavailable {
            tool: tool.to_owned(),
            unavailable: Unavailable {
                message: format!(
                    "The token endpoint of the issuer `{}`, where the caller's token is exchanged \
                     for upstream `{}`, cannot be used now ({why}). Nothing was sent upstream.",
                    self.settings.issuer, self.upstream
                ),
                retry_after: Duration::from_secs(1),
            },
            // Nothing reached the upstream.
            may_have_run: false,
        }
    }
}

fn credentials(tool: &str, problem: CredentialProblem, message: String) -> ToolError {
    ToolError::Credentials {
        tool: tool.to_owned(),
        problem,
        message,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An issuer's text as it may be repeated: at most `max` characters, no control characters.
fn shown(text: &str, max: usize) -> String {
    text.chars().filter(|c| !c.is_control()).take(max).collect()
}

/// What a failed request to the issuer says, without its URL.
fn without_url(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        format!("it did not answer within {} s", TIMEOUT.as_secs())
    } else if err.is_connect() {
        "it cannot be reached".into()
    } else {
        "the request failed".into()
    }
}
