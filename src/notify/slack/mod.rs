//! Slack: the Block Kit of the messages that ask approvers there ([`blocks`]), which the
//! interactions door reads back when a button is pressed.

pub mod blocks;
