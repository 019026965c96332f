//! The audit chain to syslog: each entry one RFC 5424 message (facility `log audit`, severity
//! informational; `MSGID` the event's type; the entry's JSON line as the message, UTF-8 with its
//! byte order mark), framed by octet counting (RFC 6587 over TCP, RFC 5425 over TLS), on one
//! connection kept open between batches and made again after a failure.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Sink;
use crate::store::AuditEntry;

/// How long connecting, and writing one batch, may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// `<PRI>`: facility 13 (log audit) times 8, plus severity 6 (informational).
const PRI: u32 = 13 * 8 + 6;

/// Where the messages go.
#[derive(Debug, Clone)]
pub(super) struct Target {
    host: String,
    port: u16,
    tls: bool,
}

impl Target {
    /// `tcp://host:port` or `tls://host:port`.
    pub(super) fn parse(url: &str) -> Result<Self, String> {
        let parsed = url::Url::parse(url).map_err(|err| format!("`{url}`: {err}"))?;
        let tls = match parsed.scheme() {
            "tcp" => false,
            "tls" => true,
            other => return Err(format!("`{url}`: the scheme is {other}, not tcp or tls")),
        };
        let host = parsed
            .host_str()
            .filter(|host| !host.is_empty())
            .ok_or_else(|| format!("`{url}` names no host"))?
            .trim_matches(['[', ']'])
            .to_owned();
        let port = parsed
            .port()
            .ok_or_else(|| format!("`{url}` names no port"))?;
        Ok(Target { host, port, tls })
    }
}

/// A connection to the receiver.
enum Connection {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection {
    fn writer(&mut self) -> &mut (dyn AsyncWrite + Unpin + Send) {
        match self {
            Connection::Tcp(tcp) => tcp,
            Connection::Tls(tls) => tls.as_mut(),
        }
    }

    /// Whether the receiver is still there: it sends nothing, so a socket that reads as ended
    /// (or failed) was closed. Syslog has no acknowledgement: this keeps a batch from being
    /// written into a connection the receiver has already left (its bytes would be accepted by
    /// the kernel and lost).
    fn open(&self) -> bool {
        use futures_util::FutureExt as _;
        let tcp = match self {
            Connection::Tcp(tcp) => tcp,
            Connection::Tls(tls) => tls.get_ref().0,
        };
        let mut byte = [0u8; 1];
        !matches!(tcp.peek(&mut byte).now_or_never(), Some(Ok(0) | Err(_)))
    }
}

/// A syslog receiver, and the connection to it while it lasts.
pub(super) struct Syslog {
    target: Target,
    hostname: String,
    connection: Option<Connection>,
}

impl Syslog {
    pub(super) fn new(url: &str) -> Result<Self, String> {
        Ok(Syslog {
            target: Target::parse(url)?,
            hostname: hostname(),
            connection: None,
        })
    }

    async fn connect(&self) -> Result<Connection, String> {
        let address = (self.target.host.as_str(), self.target.port);
        let tcp = tokio::time::timeout(TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| "connecting timed out".to_owned())?
            .map_err(|err| format!("cannot connect: {err}"))?;
        tcp.set_nodelay(true).ok();
        if !self.target.tls {
            return Ok(Connection::Tcp(tcp));
        }
        crate::base::install_crypto();
        use rustls_platform_verifier::ConfigVerifierExt as _;
        let config = rustls::ClientConfig::with_platform_verifier()
            .map_err(|err| format!("no TLS verifier: {err}"))?;
        let name = rustls::pki_types::ServerName::try_from(self.target.host.clone())
            .map_err(|err| format!("`{}`: {err}", self.target.host))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp);
        let tls = tokio::time::timeout(TIMEOUT, tls)
            .await
            .map_err(|_| "the TLS handshake timed out".to_owned())?
            .map_err(|err| format!("TLS: {err}"))?;
        Ok(Connection::Tls(Box::new(tls)))
    }
}

/// This machine's name, as a syslog `HOSTNAME` (printable ASCII, at most 255), or `-`.
fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname writes at most that and we
    // read up to the first NUL within it.
    let named = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0;
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    let name: String = String::from_utf8_lossy(&buffer[..end])
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    if named && !name.is_empty() {
        name
    } else {
        "-".into()
    }
}

/// One entry as an RFC 5424 message, framed by its length (octet counting).
pub(super) fn frame(entry: &AuditEntry, hostname: &str) -> Vec<u8> {
    let event: serde_json::Value = serde_json::from_str(&entry.entry).unwrap_or_default();
    let at = event["at"].as_i64().unwrap_or_default();
    let time = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + Duration::from_millis(at.max(0).unsigned_abs()),
    );
    // MSGID: printable ASCII, at most 32 characters.
    let msgid: String = event["event"]["type"]
        .as_str()
        .unwrap_or("-")
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(32)
        .collect();
    let message = format!(
        "<{PRI}>1 {time} {hostname} toolgate {pid} {msgid} - \u{feff}{line}",
        pid = std::process::id(),
        line = entry.line()
    );
    let mut framed = format!("{} ", message.len()).into_bytes();
    framed.extend_from_slice(message.as_bytes());
    framed
}

impl Sink for Syslog {
    fn send<'a>(
        &'a mut self,
        entries: &'a [AuditEntry],
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            let mut connection = match self.connection.take() {
                Some(connection) if connection.open() => connection,
                _ => self.connect().await?,
            };
            let mut bytes = Vec::with_capacity(entries.len() * 512);
            for entry in entries {
                bytes.extend(frame(entry, &self.hostname));
            }
            let written = async {
                let writer = connection.writer();
                writer.write_all(&bytes).await?;
                writer.flush().await
            };
            match tokio::time::timeout(TIMEOUT, written).await {
                Ok(Ok(())) => {
                    self.connection = Some(connection);
                    Ok(())
                }
                Ok(Err(err)) => Err(format!("cannot write: {err}")),
                Err(_) => Err("writing timed out".into()),
            }
        })
    }
}
