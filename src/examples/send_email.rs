//! `send_email`: a write whose effect can be counted. It "sends" by appending one JSON line to
//! an outbox file, after a configurable delay (so tests can interrupt it mid-call).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, serde_json};

/// Sends an email. (This demo appends it to the server's outbox file.)
#[derive(Debug, Clone, Tool)]
#[tool(effect = "write")]
pub struct SendEmail {
    outbox: PathBuf,
    delay: Duration,
    /// Appends from this process go one at a time, so lines never interleave.
    lock: Arc<Mutex<()>>,
}

impl SendEmail {
    /// A sender appending to `outbox` after waiting `delay`.
    pub fn new(outbox: PathBuf, delay: Duration) -> Self {
        SendEmail {
            outbox,
            delay,
            lock: Arc::default(),
        }
    }
}

/// The input of `send_email`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Email {
    /// The recipient's address.
    #[schemars(length(min = 1))]
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The message body.
    pub body: String,
}

/// The receipt of a sent email.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SentEmail {
    /// The id the message was sent with.
    pub message_id: String,
}

/// One line of the outbox.
#[derive(Serialize)]
struct OutboxLine<'a> {
    message_id: &'a str,
    call_id: &'a str,
    to: &'a str,
    subject: &'a str,
    body: &'a str,
}

#[toolgate::async_trait]
impl ToolHandler for SendEmail {
    type Input = Email;
    type Output = SentEmail;

    async fn call(
        &self,
        ctx: &ToolCtx,
        input: Email,
    ) -> Result<ToolOutcome<SentEmail>, HandlerError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        // The message id derives from the call, so a retried attempt sends the same message.
        let message_id = format!("msg_{}", ctx.call_id().trim_start_matches("call_"));
        let mut line = serde_json::to_vec(&OutboxLine {
            message_id: &message_id,
            call_id: ctx.call_id(),
            to: &input.to,
            subject: &input.subject,
            body: &input.body,
        })
        .map_err(HandlerError::new)?;
        line.push(b'\n');
        // Appending a line to a file in the kernel's cache takes microseconds: less than a hop
        // to the blocking pool would, so it is done here.
        let append = || -> std::io::Result<()> {
            let _guard = self
                .lock
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.outbox)?;
            // One write of the whole line: the effect happened entirely or not at all. No fsync:
            // the line survives the process being killed (it is in the kernel's cache); this demo
            // does not pay a disk flush per email to survive a power cut.
            file.write_all(&line)
        };
        append().map_err(HandlerError::new)?;
        Ok(ToolOutcome::output(SentEmail { message_id }))
    }

    fn output_schema() -> Option<serde_json::Value> {
        Some(serde_json::to_value(schemars::schema_for!(SentEmail)).unwrap())
    }
}
