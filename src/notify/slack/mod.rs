//! Slack: the Web API a channel posts and updates its messages with ([`api`]), and the Block
//! Kit those messages are made of ([`blocks`]), which the interactions door reads back when a
//! button is pressed.

pub mod api;
pub mod blocks;
