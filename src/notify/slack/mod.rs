//! Slack: the Web API a channel posts and updates its messages with ([`api`]), and the Block
//! Kit those messages are made of.

pub mod api;
