//! `/inbox`: the approval inbox, a web page for the people who decide.
//!
//! A door like REST and MCP: it reads the store and sends every decision through
//! [`crate::dispatch::Dispatcher`] exactly as `/approvals` and `/calls/{id}/resolve` do, with the
//! signed-in key's name as the actor. Its URLs name calls, never suspension tokens: the server
//! looks the pending token up from the call, so tokens stay out of browser history and logs.
//!
//! - Pages are rendered on the server from compile-time checked templates (askama, which
//!   escapes every value for HTML; nothing a caller or a model wrote is ever marked safe),
//!   with one stylesheet and one small script embedded in the binary (`assets.rs`). Every page
//!   carries a Content-Security-Policy without inline scripts or styles.
//! - Sign-in (`sign_in.rs`, the session in `session.rs`): a person pastes an approver or admin
//!   key; the session is a random id in an `HttpOnly`, `SameSite=Strict` cookie, stored
//!   server-side by its SHA-256 (so it survives restarts and works on every replica), re-checked
//!   against the configured keys on every request. Every state-changing form carries a CSRF
//!   token derived from the session id.
//!   Attempts are rate-limited per client address (`limit.rs`). With auth off (no keys), no
//!   sign-in is needed: the page acts as the anonymous admin, as every REST request then does,
//!   in a session of its own so that its forms are still bound to a CSRF token. With
//!   `[inbox.oidc]`, a person signs in with the identity provider instead (`oidc.rs`), as
//!   `<issuer>:<subject>` with the rights its grants give; `key_sign_in = false` turns the key
//!   form off.
//! - The pages: the queue (live, over the same event stream as `GET /events`) and the calls to
//!   reconcile (`pages.rs`); one call (`call.rs`): what is asked, what approving does, its input
//!   as a readable list, its history in sentences (`history.rs`); the standing approvals that
//!   hold, each revocable, and their offer on the approve form (`standing.rs`); for admins,
//!   the upstream tools held because their definition changed, both definitions shown, each
//!   with its accept button (`changes.rs`, `/inbox/changes`).
//! - The decisions (`decide.rs`), with answer forms generated from JSON Schemas (`form/`).
//!   Approving a `write` takes a second step, a confirmation, without script; after a
//!   decision, the call's page says what it did and links to the next approval.
//! - Decision links (`link.rs`): the page a person reaches from a message's signed link, to
//!   decide its one approval without a sign-in (the link itself is [`crate::notify::links`]'s).
//! - Text from tools and schemas is split into plain text and inline code (`prose.rs`), each
//!   escaped; times are written in UTC and shown in the viewer's local time by the script.

mod assets;
mod call;
mod changes;
pub mod config;
mod decide;
mod edit;
mod form;
mod history;
mod limit;
mod link;
mod oidc;
mod pages;
mod prose;
mod session;
mod sign_in;
mod standing;
mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};

use crate::dispatch::Dispatcher;
use crate::http::auth::{Access, Keys};
use crate::http::gate::Gates;
use crate::slots::Slots;

/// How long a sign-in lasts by default: 12 hours.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(43_200);

/// How the inbox is served (`[inbox]` in the configuration).
#[derive(Debug, Clone)]
pub struct InboxOptions {
    /// Whether `/inbox` is served at all.
    pub enabled: bool,
    /// How long a session lasts after sign-in.
    pub session_ttl: Duration,
    /// Whether the cookies are `Secure` (sent over HTTPS only) even on a request that did not
    /// say it came over TLS (`X-Forwarded-Proto: https`).
    pub secure_cookies: bool,
    /// Whether a person may sign in by pasting an API key (`[inbox] key_sign_in`).
    pub key_sign_in: bool,
    /// Single sign-on with an identity provider (`[inbox.oidc]`).
    pub oidc: Option<InboxOidc>,
    /// The base URL of links in messages (`[inbox] public_url`, no trailing `/`); empty:
    /// `http://<listen address>`.
    pub public_url: String,
    /// How long a decision link serves (`[inbox] link_ttl_s`).
    pub link_ttl: Duration,
    /// What a message's link is (`[inbox] links`).
    pub links: config::LinkMode,
}

/// "Sign in with <issuer>": the sign-in, and where the issuer sends the browser back.
#[derive(Debug, Clone)]
pub struct InboxOidc {
    /// The issuer and this server's client of it.
    pub sign_in: Arc<crate::identity::SignIn>,
    /// The callback's absolute URL, as registered with the issuer (`…/inbox/oidc/callback`).
    pub redirect_url: String,
}

impl Default for InboxOptions {
    fn default() -> Self {
        InboxOptions {
            enabled: true,
            session_ttl: DEFAULT_SESSION_TTL,
            secure_cookies: false,
            key_sign_in: true,
            oidc: None,
            public_url: String::new(),
            link_ttl: Duration::from_secs(86_400),
            links: config::LinkMode::Signed,
        }
    }
}

/// What every inbox handler shares: the dispatcher every decision goes through, its options,
/// the keys people sign in with, and the sign-in limiter. One `Arc`, cloned per request.
#[derive(Clone)]
pub(crate) struct InboxState(Arc<Inbox>);

pub(crate) struct Inbox {
    dispatcher: Dispatcher,
    options: InboxOptions,
    keys: Arc<Keys>,
    limiter: limit::Limiter,
    /// The server's `max_in_flight`: a request takes its slot once its session checks out.
    in_flight: Arc<Slots>,
    /// Decision links, and the people they are made for.
    links: link::LinkPages,
    /// The pinned upstreams' changes, for admins (`changes`).
    pins: crate::upstream::PinBook,
}

impl std::ops::Deref for InboxState {
    type Target = Inbox;

    fn deref(&self) -> &Inbox {
        &self.0
    }
}

/// The inbox's routes, over `dispatcher`. Their gate counts requests and reads bodies within
/// their time, but checks no bearer token and takes no slot of `max_in_flight`: each page
/// checks the session cookie itself (a browser sends no bearer token), takes its slot once the
/// session checks out, and answers HTML.
pub(crate) fn router(
    dispatcher: Dispatcher,
    options: InboxOptions,
    gates: &Gates,
    links: Arc<crate::notify::Links>,
    people: Arc<crate::notify::People>,
    pins: crate::upstream::PinBook,
) -> Router {
    let state = InboxState(Arc::new(Inbox {
        dispatcher,
        options,
        keys: gates.keys().clone(),
        limiter: limit::Limiter::default(),
        in_flight: gates.in_flight().clone(),
        links: link::LinkPages { links, people },
        pins,
    }));
    Router::new()
        .route("/inbox", get(pages::queue))
        .route("/inbox/queue", get(pages::queue_fragment))
        .route("/inbox/events", get(pages::events))
        .route("/inbox/reconcile", get(pages::reconcile))
        .route("/inbox/calls/{call_id}", get(call::call))
        .route("/inbox/calls/{call_id}/approve", post(decide::approve))
        .route("/inbox/calls/{call_id}/reject", post(decide::reject))
        .route("/inbox/calls/{call_id}/complete", post(decide::complete))
        .route("/inbox/calls/{call_id}/resolve", post(decide::resolve))
        .route("/inbox/standing", get(standing::list))
        .route("/inbox/standing/{id}/revoke", post(standing::revoke))
        .route("/inbox/changes", get(changes::list))
        .route(
            "/inbox/changes/{upstream}/{tool}/accept",
            post(changes::accept),
        )
        .route("/inbox/link/{signed}", get(link::open))
        .route("/inbox/link/{signed}/approve", post(link::approve))
        .route("/inbox/link/{signed}/reject", post(link::reject))
        .route("/inbox/sign-in", post(sign_in::sign_in))
        .route("/inbox/sign-out", post(sign_in::sign_out))
        .route("/inbox/oidc/start", get(oidc::start))
        .route("/inbox/oidc/callback", get(oidc::callback))
        .route("/inbox/assets/{file}", get(assets::serve))
        .route_layer(gates.route(Access::Inbox))
        .with_state(state)
}
