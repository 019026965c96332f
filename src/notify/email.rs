//! Email over SMTP (`[[notify]] kind = "email"`), with lettre: a multipart/alternative message,
//! its text and its HTML (the template `notify_email.html`, which escapes everything it is
//! given) saying who asks, which tool, why, the input as the inbox lists it, and the link to
//! decide.
//!
//! The SMTP server is `smtp://` (STARTTLS `required` by default, or `opportunistic`, or `off`)
//! or `smtps://` (TLS on connect); every exchange with it has a timeout. Its answer decides
//! what comes next: 2xx delivered, 4xx (and a connection that fails) retried, 5xx refused for
//! good. Nothing a caller wrote goes into a header but the tool's name, whose characters are
//! few; the subject is bounded and its control characters removed anyway.

use std::time::Duration;

use askama::Template;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde::Deserialize;

use super::message::{Asked, MessageFacts, bounded};
use crate::feed::channels::Sent;

/// How long one exchange with the SMTP server may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// STARTTLS on an `smtp://` server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Starttls {
    /// Refuse a server that does not offer it (the default).
    #[default]
    Required,
    /// Use it when the server offers it.
    Opportunistic,
    /// Plain text: only for a relay on the same host or network.
    Off,
}

/// An email channel's server, sender and fixed recipients.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Vec<String>,
}

impl Mailer {
    /// A mailer sending through `url` as `from`, to `to` besides the people; a refusal names
    /// its key and why.
    pub(crate) fn new(
        url: &str,
        starttls: Starttls,
        from: &str,
        to: &[String],
        credentials: Option<(String, String)>,
    ) -> Result<Self, (&'static str, String)> {
        crate::base::install_crypto();
        let parsed = url::Url::parse(url).map_err(|err| ("smtp_url", err.to_string()))?;
        let host = parsed
            .host_str()
            .filter(|host| !host.is_empty())
            .ok_or(("smtp_url", "names no host".to_owned()))?
            .trim_matches(['[', ']'])
            .to_owned();
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err((
                "smtp_url",
                "carries credentials: use `username` and `password_env`".into(),
            ));
        }
        let tls_error = |err: lettre::transport::smtp::Error| ("smtp_url", err.to_string());
        let builder = match (parsed.scheme(), starttls) {
            ("smtps", _) => AsyncSmtpTransport::<Tokio1Executor>::relay(&host)
                .map_err(tls_error)?
                .port(parsed.port().unwrap_or(465)),
            ("smtp", mode) => {
                let tls = match mode {
                    Starttls::Required => {
                        Tls::Required(TlsParameters::new(host.clone()).map_err(tls_error)?)
                    }
                    Starttls::Opportunistic => {
                        Tls::Opportunistic(TlsParameters::new(host.clone()).map_err(tls_error)?)
                    }
                    Starttls::Off => Tls::None,
                };
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.clone())
                    .port(parsed.port().unwrap_or(587))
                    .tls(tls)
            }
            (other, _) => {
                return Err((
                    "smtp_url",
                    format!("`{other}://` is not smtp:// or smtps://"),
                ));
            }
        };
        let mut builder = builder.timeout(Some(EXCHANGE_TIMEOUT));
        if let Some((user, password)) = credentials {
            builder = builder.credentials(Credentials::new(user, password));
        }
        let from: Mailbox = from
            .parse()
            .map_err(|err| ("from", format!("`{from}` is not an address: {err}")))?;
        for address in to {
            address
                .parse::<Mailbox>()
                .map_err(|err| ("to", format!("`{address}` is not an address: {err}")))?;
        }
        Ok(Mailer {
            transport: builder.build(),
            from,
            to: to.to_vec(),
        })
    }

    /// The fixed recipients.
    pub(crate) fn to(&self) -> &[String] {
        &self.to
    }

    /// Sends `facts`' message to `recipient`, once.
    pub(crate) async fn send(&self, facts: &MessageFacts, recipient: &str, id: &str) -> Sent {
        let message = match self.message(facts, recipient, id) {
            Ok(message) => message,
            Err(error) => {
                return Sent::Failed {
                    status: None,
                    error,
                };
            }
        };
        match self.transport.send(message).await {
            Ok(response) => Sent::Delivered {
                status: u16::from(response.code()),
                receipt: None,
            },
            Err(err) => {
                let status = err.status().map(u16::from);
                if err.is_permanent() {
                    Sent::Failed {
                        status,
                        error: format!("the SMTP server refused it: {err}"),
                    }
                } else {
                    let error = if err.is_transient() {
                        format!("the SMTP server deferred it: {err}")
                    } else if err.is_timeout() {
                        "the SMTP server did not answer in time".to_owned()
                    } else {
                        format!("cannot reach the SMTP server: {err}")
                    };
                    Sent::Retry {
                        status,
                        error,
                        after: None,
                    }
                }
            }
        }
    }

    /// The message to `recipient`, its Message-ID made of the delivery's `id`.
    fn message(&self, facts: &MessageFacts, recipient: &str, id: &str) -> Result<Message, String> {
        let to: Mailbox = recipient
            .parse()
            .map_err(|err| format!("`{recipient}` is not an address: {err}"))?;
        let mail = Mail::of(facts);
        let html = mail.render().map_err(|err| err.to_string())?;
        let text = mail.text();
        Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject.clone())
            .message_id(Some(format!("<{id}@toolgate>")))
            .multipart(MultiPart::alternative_plain_html(text, html))
            .map_err(|err| err.to_string())
    }
}

/// One line of the input, as the mail lists it.
struct MailLine {
    indent: usize,
    label: String,
    value: Option<String>,
}

/// The message, as its template and its text part show it. Every field is text: the template
/// escapes it.
#[derive(Template)]
#[template(path = "notify_email.html")]
struct Mail {
    subject: String,
    headline: String,
    tool: String,
    asker: String,
    reason: String,
    expires: Option<String>,
    lines: Vec<MailLine>,
    truncated: bool,
    link: String,
    action: String,
    call_id: String,
}

impl Mail {
    fn of(facts: &MessageFacts) -> Mail {
        let (subject, headline) = match facts.asked {
            Asked::Suspended => (
                format!("Approval needed: {}", facts.tool),
                format!(
                    "{} asks to run {}, which needs your approval.",
                    facts.asker(),
                    facts.tool
                ),
            ),
            Asked::Escalated => (
                format!("Escalated approval: {}", facts.tool),
                format!(
                    "Nobody has decided on {}'s call of {} yet: it was escalated to you.",
                    facts.asker(),
                    facts.tool
                ),
            ),
        };
        let action = if facts.one_click {
            "Approve or reject"
        } else {
            "Review and decide"
        };
        Mail {
            subject: bounded(&subject, 200),
            headline,
            tool: facts.tool.clone(),
            asker: facts.asker(),
            reason: facts.reason.clone(),
            expires: facts.expires_at.map(|at| at.to_string()),
            lines: facts
                .input
                .iter()
                .map(|line| MailLine {
                    indent: line.depth.min(6) * 16,
                    label: line.label.clone(),
                    value: line.value.clone(),
                })
                .collect(),
            truncated: facts.input_truncated,
            link: facts.link.clone(),
            action: action.into(),
            call_id: facts.call_id.clone(),
        }
    }

    /// The text part.
    fn text(&self) -> String {
        let mut text = format!(
            "{}\n\nTool:   {}\nCaller: {}\nReason: {}\n",
            self.headline, self.tool, self.asker, self.reason
        );
        if let Some(expires) = &self.expires {
            text.push_str(&format!("Expires: {expires}\n"));
        }
        text.push_str("\nInput:\n");
        if self.lines.is_empty() {
            text.push_str("  (no input)\n");
        }
        for line in &self.lines {
            let pad = " ".repeat(2 + line.indent / 8);
            match &line.value {
                Some(value) => text.push_str(&format!("{pad}{}: {value}\n", line.label)),
                None => text.push_str(&format!("{pad}{}:\n", line.label)),
            }
        }
        if self.truncated {
            text.push_str("  (more input on the call's page)\n");
        }
        text.push_str(&format!(
            "\n{}: {}\n\nCall {}. You receive this because you may decide approvals of this \
             tool.\n",
            self.action, self.link, self.call_id
        ));
        text
    }
}
