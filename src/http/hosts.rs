//! Every route's defence against DNS rebinding: a request whose `Host`, or whose `Origin` when
//! it sends one, names a host outside `[server] allowed_hosts` (merged with `[mcp]
//! allowed_hosts`; with the bound address, and `localhost` on a loopback one) is refused `403`
//! with the error envelope, saying what to list. It is the first check of every gated route's
//! gate (`super::auth`): with auth off, a page on a foreign name that resolves to this server
//! can neither read nor change anything, on any door.
//!
//! The rules are the MCP SDK's (rmcp 3.11, `validate_dns_rebinding_headers`), which `/mcp`'s
//! transport applies again as a backstop: hosts compare without case or brackets, an entry
//! without a port accepts any port; an `Origin` passes when its scheme is `http` or `https` and
//! its host is an entry's (any port), and a request without one (every client that is not a
//! browser, and a browser's own top-level navigation) passes. `crate::mcp`'s tests send the same
//! requests to both and assert they agree. An empty list accepts every `Host` (a server bound
//! to every address with no names listed), and refuses every `Origin`.

use axum::http::uri::Authority;
use axum::http::{HeaderMap, Uri, header};

use super::error::ApiError;

/// The `Host` values to accept for a server bound to `bind`: its address, `localhost` when
/// that is a loopback address, and `extra` (the names it is reached by), each once.
pub fn allowed_for(bind: std::net::IpAddr, extra: &[String]) -> Vec<String> {
    let mut hosts = vec![bind.to_string()];
    if bind.is_loopback() {
        hosts.push("localhost".into());
    }
    for host in extra {
        if !hosts.contains(host) {
            hosts.push(host.clone());
        }
    }
    hosts
}

/// The hosts every gated route accepts, as the check compares them.
#[derive(Debug)]
pub(crate) struct AllowedHosts {
    /// Each allowed entry as a host (lowercase, unbracketed) and, when it names
    /// one, the only port it accepts. Empty accepts every `Host` (as the SDK's does).
    hosts: Vec<(String, Option<u16>)>,
    /// The `(scheme, host)` pairs an `Origin` may name (any port): `http` and `https` for each
    /// entry that is a bare host. Empty refuses every `Origin`.
    origins: Vec<(String, String)>,
}

impl AllowedHosts {
    /// The check for `allowed` (the list `/mcp`'s SDK is given too).
    pub(crate) fn new(allowed: &[String]) -> Self {
        let hosts = allowed
            .iter()
            .filter_map(|entry| {
                let entry = entry.trim();
                if entry.is_empty() {
                    return None;
                }
                Some(match Authority::try_from(entry) {
                    Ok(authority) => (normalize_host(authority.host()), authority.port_u16()),
                    Err(_) => (normalize_host(entry), None),
                })
            })
            .collect();
        let origins = allowed
            .iter()
            .flat_map(|entry| {
                let entry = if entry.contains(':') && !entry.starts_with('[') {
                    format!("[{entry}]")
                } else {
                    entry.clone()
                };
                ["http", "https"].map(|scheme| format!("{scheme}://{entry}"))
            })
            .filter_map(|origin| match parse_origin(&origin)? {
                Origin::Tuple {
                    scheme,
                    host,
                    port: None,
                } => Some((scheme, host)),
                _ => None,
            })
            .collect();
        AllowedHosts { hosts, origins }
    }

    /// Whether a request with this URI and these headers may go on.
    pub(crate) fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        // The usual `Host` (a name or address, maybe a port) is compared where it lies; only
        // an unusual one is parsed, and only a refused one copied.
        let simple = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .and_then(simple_host);
        let allowed = |host: &str, port: Option<u16>| {
            self.hosts.is_empty()
                || self.hosts.iter().any(|(allowed, allowed_port)| {
                    allowed.eq_ignore_ascii_case(host)
                        && allowed_port.is_none_or(|p| port == Some(p))
                })
        };
        let refused = match simple {
            Some((host, port)) => (!allowed(host, port)).then(|| host.to_ascii_lowercase()),
            None => {
                let (host, port) = request_host(uri, headers)?;
                (!allowed(&host, port)).then_some(host)
            }
        };
        if let Some(host) = refused {
            tracing::warn!(host, "refused a Host not allowed (possible DNS rebinding)");
            return Err(ApiError::HostNotAllowed(host));
        }
        let Some(value) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let allowed =
            value
                .to_str()
                .ok()
                .and_then(parse_origin)
                .is_some_and(|origin| match origin {
                    Origin::Null => false,
                    Origin::Tuple { scheme, host, .. } => {
                        self.origins.iter().any(|(s, h)| *s == scheme && *h == host)
                    }
                });
        if !allowed {
            let origin = String::from_utf8_lossy(value.as_bytes()).into_owned();
            tracing::warn!(
                origin,
                "refused an Origin not allowed (possible DNS rebinding)"
            );
            return Err(ApiError::OriginNotAllowed(origin));
        }
        Ok(())
    }
}

/// The request's host (normalized) and port: its `Host` header, or the URI's authority (HTTP/2
/// carries it there). One that cannot be read is a bad request, as the SDK answers it.
fn request_host(uri: &Uri, headers: &HeaderMap) -> Result<(String, Option<u16>), ApiError> {
    let authority = match headers.get(header::HOST) {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|value| Authority::try_from(value).ok())
            .ok_or_else(|| {
                ApiError::BadRequest("The Host header is not a host name with a port.".into())
            })?,
        None => uri
            .authority()
            .cloned()
            .ok_or_else(|| ApiError::BadRequest("The request names no Host.".into()))?,
    };
    Ok((normalize_host(authority.host()), authority.port_u16()))
}

/// A `Host` value in its usual shape, as a host (without brackets) and a port: a name or IPv4
/// address of letters, digits, dots and dashes, or a bracketed IPv6 address, then `:` and 1 to
/// 5 digits or nothing. Anything else is `None`, for [`request_host`] to parse as the SDK does.
fn simple_host(value: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(bracketed) = value.strip_prefix('[') {
        let (host, rest) = bracketed.split_once(']')?;
        let ipv6 = host
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        (ipv6.then_some(host)?, rest)
    } else {
        let end = value.find(':').unwrap_or(value.len());
        let (host, rest) = value.split_at(end);
        let name = host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        (name.then_some(host)?, rest)
    };
    if host.is_empty() {
        return None;
    }
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => None,
        Some(digits)
            if (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Some(digits.parse::<u16>().ok()?)
        }
        _ => return None,
    };
    Some((host, port))
}

/// A host as compared: lowercase, without an IPv6 address's brackets.
fn normalize_host(host: &str) -> String {
    host.trim_matches('[')
        .trim_matches(']')
        .to_ascii_lowercase()
}

/// An `Origin` value as compared.
enum Origin {
    /// `null` (an opaque origin: a sandboxed page, a file), never allowed.
    Null,
    /// `scheme://host[:port]`.
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

/// An `Origin` value, or `None` when it is not one.
fn parse_origin(value: &str) -> Option<Origin> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.eq_ignore_ascii_case("null") {
        return Some(Origin::Null);
    }
    let uri = Uri::try_from(value).ok()?;
    let authority = uri.authority()?;
    Some(Origin::Tuple {
        scheme: uri.scheme_str()?.to_ascii_lowercase(),
        host: normalize_host(authority.host()),
        port: authority.port_u16(),
    })
}
