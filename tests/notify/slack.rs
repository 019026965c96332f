//! Slack: messages posted to each person who may decide (a direct message) and to the channel,
//! against a stand-in for Slack's Web API, and updated once the approval is decided.
