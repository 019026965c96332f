//! Approvers where they work: the people a channel reaches (`[[people]]`), and the channels
//! that ask them by mail and in Slack when a call waits for their decision.
//!
//! A floor above the lifecycle (`dispatch`) and identity, below the shared HTTP layer and the
//! doors: the doors that decide through a channel (Slack's interactions, a decision link) ask
//! it who a person is; the composition root wires its channels into the webhooks' outbox.

pub mod message;
pub mod people;
pub mod slack;

pub use people::{People, PeopleError, Person, PersonConfig};
