//! Demo tools, served by default, written the way a user of the crate writes tools: a type
//! deriving `Tool` for its metadata and implementing `ToolHandler` by hand, using only what
//! `toolgate` exports.
//!
//! - [`Echo`] (read): returns its text.
//! - [`AskHuman`] (read): suspends with a question and returns the approver's answer.
//! - [`IssueRefund`] (write): refunds under a threshold at once, suspends above it; declares an
//!   idempotency key and an output schema.
//! - [`SendEmail`] (write): "sends" by appending a line to `<data-dir>/outbox.jsonl`.

mod ask_human;
pub mod config;
mod echo;
mod issue_refund;
mod send_email;

use std::path::Path;

pub use ask_human::{AskHuman, AskHumanInput, HumanAnswer};
pub use echo::{Echo, EchoText};
pub use issue_refund::{IssueRefund, Refund, RefundApproval, RefundRequest, RefundStatus};
pub use send_email::{Email, SendEmail, SentEmail};

use crate::contract::registry::{RegistryError, ToolSet};
use config::ExamplesConfig;

/// Registers the four example tools in `tools`, configured by `config`, with the outbox in
/// `data_dir`.
pub fn register(
    tools: &mut ToolSet,
    config: &ExamplesConfig,
    data_dir: &Path,
) -> Result<(), RegistryError> {
    tools
        .register(Echo)?
        .register(AskHuman)?
        .register(IssueRefund::new(config.approval_threshold_cents))?
        .register(SendEmail::new(
            data_dir.join("outbox.jsonl"),
            std::time::Duration::from_millis(config.send_email_delay_ms),
        ))?;
    Ok(())
}
