//! `[[notify]]`: the notification channels' config section (email over SMTP, Slack), checked
//! when the file is read, and its translation into [`Channel`]s with their secrets read from
//! the environment when the server starts.

use serde::Deserialize;

use super::email::{Mailer, Starttls};
use super::slack::api::SlackApi;
use super::{Channel, ChannelKind};
use crate::dispatch::who::Reach;

/// The feed types a channel may be told of: the ones that ask a person to decide.
pub const NOTIFY_TYPES: [&str; 2] = ["call.suspended", "call.escalated"];

/// One `[[notify]]` entry.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The channel's name, as deliveries and metrics name it.
    pub name: String,
    /// `email` or `slack`.
    pub kind: NotifyKind,
    /// The feed types that make a message (default both: `call.suspended`, `call.escalated`).
    #[serde(default = "default_on")]
    pub on: Vec<String>,
    /// Only calls of the tools these globs match; unset: every tool.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Email: the SMTP server, `smtp://host:port` (`smtps://` for TLS on connect).
    #[serde(default)]
    pub smtp_url: Option<String>,
    /// Email: STARTTLS on an `smtp://` server: `required` (the default), `opportunistic`, `off`.
    #[serde(default)]
    pub starttls: Starttls,
    /// Email: the sender's address.
    #[serde(default)]
    pub from: Option<String>,
    /// Email: addresses always told, besides the people who may decide.
    #[serde(default)]
    pub to: Vec<String>,
    /// Email: the SMTP user name, when the server asks for one.
    #[serde(default)]
    pub username: Option<String>,
    /// Email: the environment variable holding the SMTP password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// Slack: the environment variable holding the bot token (`xoxb-...`).
    #[serde(default)]
    pub bot_token_env: Option<String>,
    /// Slack: the environment variable holding the app's signing secret (the interactions
    /// door verifies Slack's requests with it).
    #[serde(default)]
    pub signing_secret_env: Option<String>,
    /// Slack: the Web API's base URL (default `https://slack.com/api`).
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// Slack: a channel id also posted to, besides the people who may decide.
    #[serde(default)]
    pub channel: Option<String>,
}

impl std::fmt::Debug for NotifyConfig {
    // The SMTP URL may carry a password: only its scheme, host and port are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("on", &self.on)
            .field("tools", &self.tools)
            .field("smtp_url", &self.smtp_url.as_deref().map(shown))
            .field("starttls", &self.starttls)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("username", &self.username)
            .field("password_env", &self.password_env)
            .field("bot_token_env", &self.bot_token_env)
            .field("signing_secret_env", &self.signing_secret_env)
            .field("api_url", &self.api_url)
            .field("channel", &self.channel)
            .finish()
    }
}

/// A URL as logs show it: its scheme, host and port.
fn shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(url) => format!(
            "{}://{}{}",
            url.scheme(),
            url.host_str().unwrap_or(""),
            url.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "(not a URL)".into(),
    }
}

/// What kind of channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyKind {
    /// Mail over SMTP.
    Email,
    /// Slack messages through its Web API.
    Slack,
}

fn default_on() -> Vec<String> {
    NOTIFY_TYPES.map(str::to_owned).to_vec()
}

fn default_api_url() -> String {
    "https://slack.com/api".into()
}

/// Why a `[[notify]]` entry was refused: the key, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("notify.{key}: {why}")]
pub struct NotifyError {
    /// The key (`smtp_url`), after `notify.`.
    pub key: String,
    /// Why.
    pub why: String,
}

fn refuse(name: &str, key: &str, why: impl Into<String>) -> NotifyError {
    let key = if name.is_empty() {
        key.to_owned()
    } else {
        format!("{key} (of `{name}`)")
    };
    NotifyError {
        key,
        why: why.into(),
    }
}

/// The channels of `configs`, their secrets read by `env` (a variable's value by its name);
/// `checking` only (as the file is read): a variable not set yet is let through.
pub fn channels(
    configs: &[NotifyConfig],
    env: impl Fn(&str) -> Option<String>,
    checking: bool,
) -> Result<Vec<Channel>, NotifyError> {
    let mut channels: Vec<Channel> = Vec::new();
    for config in configs {
        let channel = config.channel(&env, checking)?;
        if channels.iter().any(|other| other.name == channel.name) {
            return Err(refuse(&config.name, "name", "two channels have this name"));
        }
        channels.push(channel);
    }
    Ok(channels)
}

impl NotifyConfig {
    fn channel(
        &self,
        env: &impl Fn(&str) -> Option<String>,
        checking: bool,
    ) -> Result<Channel, NotifyError> {
        let name = &self.name;
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        if name.is_empty() || name.len() > 64 || !name.bytes().all(allowed) {
            return Err(refuse(
                "",
                "name",
                format!("`{name}` is not a name (1 to 64 letters, digits, `_`, `-`, `.`)"),
            ));
        }
        if self.on.is_empty() {
            return Err(refuse(name, "on", "names no feed type"));
        }
        for kind in &self.on {
            if !NOTIFY_TYPES.contains(&kind.as_str()) {
                return Err(refuse(
                    name,
                    "on",
                    format!("`{kind}` is not one of {}", NOTIFY_TYPES.join(", ")),
                ));
            }
        }
        let tools = match &self.tools {
            None => Reach::all(),
            Some(globs) => Reach::of(globs).map_err(|why| refuse(name, "tools", why))?,
        };
        let secret = |key: &str, var: &Option<String>| -> Result<Option<String>, NotifyError> {
            let Some(var) = var else {
                return Ok(None);
            };
            match env(var) {
                Some(value) if !value.is_empty() => Ok(Some(value)),
                _ if checking => Ok(Some(String::new())),
                _ => Err(refuse(name, key, format!("`{var}` is not set"))),
            }
        };
        let kind = match self.kind {
            NotifyKind::Email => {
                self.only(NotifyKind::Email)?;
                let url = self
                    .smtp_url
                    .as_deref()
                    .ok_or_else(|| refuse(name, "smtp_url", "an email channel needs one"))?;
                let from = self
                    .from
                    .as_deref()
                    .ok_or_else(|| refuse(name, "from", "an email channel needs one"))?;
                let password = secret("password_env", &self.password_env)?;
                if password.is_some() != self.username.is_some() {
                    return Err(refuse(
                        name,
                        "username",
                        "`username` and `password_env` go together",
                    ));
                }
                let credentials = self.username.clone().zip(password);
                let mailer = Mailer::new(url, self.starttls, from, &self.to, credentials)
                    .map_err(|(key, why)| refuse(name, key, why))?;
                ChannelKind::Email(mailer)
            }
            NotifyKind::Slack => {
                self.only(NotifyKind::Slack)?;
                if self.bot_token_env.is_none() {
                    return Err(refuse(name, "bot_token_env", "a Slack channel needs one"));
                }
                let token = secret("bot_token_env", &self.bot_token_env)?.unwrap_or_default();
                let signing = secret("signing_secret_env", &self.signing_secret_env)?;
                let api = SlackApi::new(&self.api_url, token, signing, self.channel.clone())
                    .map_err(|why| refuse(name, "api_url", why))?;
                ChannelKind::Slack(api)
            }
        };
        Ok(Channel {
            name: name.clone(),
            on: self.on.clone(),
            tools,
            kind,
        })
    }

    /// Refuses a key of the other kind of channel.
    fn only(&self, kind: NotifyKind) -> Result<(), NotifyError> {
        let email = [
            ("smtp_url", self.smtp_url.is_some()),
            ("from", self.from.is_some()),
            ("to", !self.to.is_empty()),
            ("username", self.username.is_some()),
            ("password_env", self.password_env.is_some()),
            ("starttls", self.starttls != Starttls::default()),
        ];
        let slack = [
            ("bot_token_env", self.bot_token_env.is_some()),
            ("signing_secret_env", self.signing_secret_env.is_some()),
            ("api_url", self.api_url != default_api_url()),
            ("channel", self.channel.is_some()),
        ];
        let (other, word) = match kind {
            NotifyKind::Email => (&slack[..], "a Slack"),
            NotifyKind::Slack => (&email[..], "an email"),
        };
        match other.iter().find(|(_, set)| *set) {
            Some((key, _)) => Err(refuse(
                &self.name,
                key,
                format!("is {word} channel's key; this channel's kind is another"),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[[notify]]` entries of `file`, as channels; the key of the first refusal.
    fn refused(file: &str) -> String {
        #[derive(Deserialize)]
        struct File {
            notify: Vec<NotifyConfig>,
        }
        let file: File = toml::from_str(file).unwrap();
        let env = |name: &str| (name == "SET").then(|| "xoxb-1".to_owned());
        match channels(&file.notify, env, false) {
            Ok(_) => String::new(),
            Err(err) => err.to_string(),
        }
    }

    const MAIL: &str = "[[notify]]\nname = \"m\"\nkind = \"email\"\n\
                        smtp_url = \"smtp://127.0.0.1:2525\"\nfrom = \"t@example.com\"\n";

    #[test]
    fn a_good_channel_starts_and_a_bad_key_is_named() {
        assert_eq!(refused(MAIL), "");
        let slack = "[[notify]]\nname = \"s\"\nkind = \"slack\"\nbot_token_env = \"SET\"\n";
        assert_eq!(refused(slack), "");
        for (file, key) in [
            (format!("{MAIL}on = [\"call.completed\"]\n"), "notify.on"),
            (format!("{MAIL}tools = [\"no spaces\"]\n"), "notify.tools"),
            (format!("{MAIL}channel = \"C1\"\n"), "notify.channel"),
            (format!("{MAIL}username = \"u\"\n"), "notify.username"),
            (
                format!("{MAIL}password_env = \"UNSET\"\nusername = \"u\"\n"),
                "notify.password_env",
            ),
            (MAIL.replace("smtp://", "http://"), "notify.smtp_url"),
            (
                MAIL.replace("t@example.com", "not an address"),
                "notify.from",
            ),
            (format!("{MAIL}{MAIL}"), "notify.name"),
            (slack.replace("SET", "UNSET"), "notify.bot_token_env"),
            (
                format!("{slack}smtp_url = \"smtp://x\"\n"),
                "notify.smtp_url",
            ),
        ] {
            let why = refused(&file);
            assert!(why.starts_with(key), "{key}: {why}");
        }
    }
}
