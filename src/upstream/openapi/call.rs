//! The attempt of an OpenAPI tool: one request, and what its answer means to the lifecycle.

use reqwest::header::HeaderName;
use serde_json::Value;
use tracing::Instrument as _;

use super::Operation;
use super::request::{Failure, send};
use crate::contract::ctx::ToolCtx;
use crate::contract::error::{HandlerError, ToolError};
use crate::contract::meta::Effect;
use crate::contract::outcome::ToolOutcome;
use crate::telemetry::spans;
use crate::upstream::tool::{RETRY_AFTER, UpstreamTool};

/// The header a write's idempotency key travels in.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The header a call's attestation travels in.
const ATTESTATION: HeaderName = HeaderName::from_static("toolgate-attestation");

impl UpstreamTool {
    /// Sends `input` as one request of `operation`, an operation of `api`.
    pub(in crate::upstream) async fn call_api(
        &self,
        api: &super::Api,
        operation: &Operation,
        ctx: &ToolCtx,
        input: Value,
    ) -> Result<ToolOutcome<Value>, ToolError> {
        let attestation = self.attestation(ctx, &input).await?;
        let caller = match &self.link.exchange {
            Some(exchange) => Some(exchange.bearer(&self.name, ctx).await?),
            None => None,
        };
        let mut headers = Vec::new();
        for (name, value) in &api.source.headers {
            // Checked when the configuration was read.
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                headers.push((name, value.clone()));
            }
        }
        if let Some(attestation) = attestation {
            headers.push((ATTESTATION, attestation));
        }
        let span = spans::upstream_call(&self.remote, self.link.name());
        for (name, value) in spans::meta_of(&span).into_iter().flatten() {
            if let (Ok(name), Value::String(value)) =
                (HeaderName::from_bytes(name.as_bytes()), value)
            {
                headers.push((name, value));
            }
        }
        if self.effect == Effect::Write {
            // The API's own exactly-once, where it honours the header: the same key on every
            // attempt of the call (the caller's key, else the call's id).
            let key = ctx.idempotency_key().unwrap_or(ctx.call_id());
            headers.push((IDEMPOTENCY_KEY, key.to_owned()));
        }
        let arguments = self.arguments(input)?;
        let answer = send(
            &api.client,
            operation,
            &arguments,
            headers,
            caller.as_deref(),
        )
        .instrument(span.clone())
        .await;
        if let (Some(exchange), Ok(_) | Err(Failure::Refused(_) | Failure::Undelivered(_))) =
            (&self.link.exchange, &answer)
        {
            // The API answered: what was held for the call's approval is spent.
            exchange.release(ctx.call_id());
        }
        let answer = answer.map_err(|failure| api.redact(failure));
        let failed = |message: String| ToolError::Handler {
            tool: self.name.clone(),
            source: HandlerError::message(super::super::tool::bounded(message)).permanent(),
        };
        match answer {
            Ok(output) => Ok(ToolOutcome::Output(output)),
            Err(Failure::Refused(message)) => {
                spans::failed(&span, "http_error");
                Err(failed(message))
            }
            Err(Failure::Input(message)) => Err(failed(message)),
            // Not a write: nothing happened that asking again would repeat harmfully.
            Err(Failure::Undelivered(message)) if self.effect != Effect::Write => {
                spans::failed(&span, "http_error");
                Err(failed(message))
            }
            // A write the API answered may have happened: a person settles it.
            Err(Failure::Undelivered(message)) => {
                spans::failed(&span, "undelivered");
                let message = format!(
                    "The upstream API `{}` answered: {message}",
                    self.link.name()
                );
                Err(self.unavailable(message, true))
            }
            Err(Failure::Unavailable {
                message,
                may_have_run,
                retry_after,
            }) => {
                spans::failed(&span, "unavailable");
                tracing::warn!(
                    tool = %self.name,
                    upstream = self.link.name(),
                    error = %message,
                    may_have_run,
                    "a call could not complete at its upstream API"
                );
                let message = format!(
                    "The upstream API `{}` is not available: {message}",
                    self.link.name()
                );
                Err(self.unavailable_for(message, may_have_run, retry_after.unwrap_or(RETRY_AFTER)))
            }
        }
    }
}
