//! The error responses that several routes document alike, each declared once. A route's
//! `#[utoipa::path(responses(...))]` names the sets it can answer (`StoreFailed`,
//! `BodyRefused`, …) beside the responses only it gives; a status a set covers is then not
//! written again by the route. Each response is the one envelope (`ErrorEnvelope`), as every
//! error answer is.
//!
//! The `401`, `403` and `503` that every gated route can answer are added to the whole document
//! at once (`openapi::document`), not here.

use std::collections::BTreeMap;

use utoipa::IntoResponses;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{ContentBuilder, Object, Ref, RefOr, Response, ResponseBuilder, Type};

/// The `?wait=` (or a stream's) quota headers of a `429`.
const HELD_HEADERS: &[(&str, &str)] = &[
    ("Retry-After", "Seconds to wait."),
    (
        "RateLimit-Policy",
        "The quota, e.g. `\"held\";q=64;qu=\"concurrent-requests\"`.",
    ),
    ("RateLimit", "What is left of it: `\"held\";r=0`."),
];

/// An error response: the envelope, described, with these string headers.
fn envelope(description: &str, headers: &[(&str, &str)]) -> RefOr<Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
        .build();
    let mut response = ResponseBuilder::new()
        .description(description)
        .content("application/json", content);
    for (name, about) in headers {
        let header = HeaderBuilder::new()
            .schema(Object::with_type(Type::String))
            .description(Some(*about))
            .build();
        response = response.header(*name, header);
    }
    RefOr::T(response.build())
}

/// Declares a set of error responses: a unit type whose `IntoResponses` gives them by status,
/// each written out or taken from smaller sets.
macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident { $($status:literal => $response:expr),+ $(,)? }) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                BTreeMap::from([$(($status.to_owned(), $response)),+])
            }
        }
    };
    ($(#[$doc:meta])* $name:ident = $($part:ident)|+) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                let mut responses = BTreeMap::new();
                $(responses.append(&mut $part::responses());)+
                responses
            }
        }
    };
}

error_set! {
    /// `500 internal`: the store failed (a route that reads or writes it and runs no tool).
    StoreFailed {
        "500" => envelope("`internal`: the store failed.", &[]),
    }
}

error_set! {
    /// `413` and `415`: a JSON body refused before it is read (every route that takes one).
    BodyRefused {
        "413" => envelope("`payload_too_large`: the body exceeds the server's limit.", &[]),
        "415" => envelope(
            "`unsupported_media_type`: the body is not sent as `application/json`.",
            &[],
        ),
    }
}

error_set! {
    /// `429 rate_limited`: a request that would be held (`?wait=`, a stream) past the key's
    /// `max_held`.
    HoldRefused {
        "429" => envelope(
            "`rate_limited` (with `Retry-After`, `RateLimit-Policy` and `RateLimit`): the key \
             holds as many requests (`?wait=` and streams) as its `max_held` allows; \
             `details.quota` is `max_held`.",
            HELD_HEADERS,
        ),
    }
}

error_set! {
    /// `410 suspension_expired`: a suspension nobody resolved in time (every route of a token).
    SuspensionExpired {
        "410" => envelope(
            "`suspension_expired`: nobody resolved it in time; `details` is the call's record.",
            &[],
        ),
    }
}

error_set! {
    /// `500` and `504`: a tool that ran (calling it, or approving its suspension) and failed.
    ToolRunFailed {
        "500" => envelope(
            "`tool_failed` (the tool returned an error), `tool_panicked`, or \
             `output_schema_violation` (its output does not match its output schema); the body \
             also carries `call_id`, `tool` and `\"status\": \"failed\"` (see `CallFailed`). \
             Or `internal`: the server failed.",
            &[],
        ),
        "504" => envelope(
            "`tool_timeout`: an attempt ran past the tool's timeout. A `write` call then has \
             `\"status\": \"needs_reconciliation\"`.",
            &[],
        ),
    }
}

error_set! {
    /// `400 bad_request` of a route whose only input is its path.
    PathMalformed {
        "400" => envelope("`bad_request`: the path is malformed.", &[]),
    }
}

error_set! {
    /// `404 unknown_token` (every route of a token).
    UnknownToken {
        "404" => envelope(
            "`unknown_token`: no suspension ever had this token (or none of a tool the \
             principal's `decides` reaches). Approving or completing: or `unknown_tool`, its \
             tool is no longer served.",
            &[],
        ),
    }
}

error_set! {
    /// `404`, `410`, `413` and `415`: a decision on a suspension (approve, reject, complete)
    /// that names no suspension the principal may decide, one that expired, or a body refused.
    DecisionRefused = UnknownToken | SuspensionExpired | BodyRefused
}

error_set! {
    /// `404 unknown_standing_approval` (every route of a standing approval).
    UnknownStandingApproval {
        "404" => envelope(
            "`unknown_standing_approval`: no standing approval has this id (or none of a tool \
             the principal's `decides` reaches).",
            &[],
        ),
    }
}

error_set! {
    /// `401 bad_signature`: a request a platform signs (Slack's interactions) whose signature
    /// does not verify; nothing was done.
    SignatureRefused {
        "401" => envelope(
            "`bad_signature`: the signature does not verify with any configured Slack app's \
             signing secret, a signature header is missing, or the request's timestamp is more \
             than five minutes from now; nothing was decided.",
            &[],
        ),
    }
}
