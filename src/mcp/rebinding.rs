//! `/mcp`'s defence against DNS rebinding: a request whose `Host`, or whose `Origin` when it
//! sends one, names a host outside `[mcp] allowed_hosts` (with the bound address, and
//! `localhost` on a loopback one) is refused `403` with the error envelope, saying what to list.
//!
//! The SDK's transport checks the same list (`super::service` gives it the same one), but it
//! answers in plain text. This check runs in front of it so that every refusal is the envelope,
//! and leaves the SDK's own as a backstop. Its matching is the SDK's (rmcp 3.11,
//! `validate_dns_rebinding_headers`): hosts compare without case or brackets, an entry without
//! a port accepts any port; an `Origin` passes when its scheme is `http` or `https` and its
//! host is an entry's (any port), and a request without one (every client that is not a
//! browser) passes. The tests below send the same requests to both and assert they agree, so
//! an SDK upgrade that changes its rules fails here rather than letting the two drift apart.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::ApiError;
use crate::http::layer::RoutePolicy;

/// The hosts `/mcp` accepts, as the check compares them.
#[derive(Debug)]
pub(crate) struct AllowedHosts {
    /// Each `[mcp] allowed_hosts` entry as a host (lowercase, unbracketed) and, when it names
    /// one, the only port it accepts. Empty accepts every `Host` (as the SDK's does).
    hosts: Vec<(String, Option<u16>)>,
    /// The `(scheme, host)` pairs an `Origin` may name (any port): `http` and `https` for each
    /// entry that is a bare host. Empty refuses every `Origin`.
    origins: Vec<(String, String)>,
}

impl AllowedHosts {
    /// The check for `allowed` (the list the SDK is given too).
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

    /// Whether a request with this URI and these headers may reach the SDK.
    pub(crate) fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        let (host, port) = request_host(uri, headers)?;
        let allowed = self.hosts.is_empty()
            || self.hosts.iter().any(|(allowed, allowed_port)| {
                *allowed == host && allowed_port.is_none_or(|p| port == Some(p))
            });
        if !allowed {
            tracing::warn!(
                host,
                "/mcp refused a Host not allowed (possible DNS rebinding)"
            );
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
                "/mcp refused an Origin not allowed (possible DNS rebinding)"
            );
            return Err(ApiError::OriginNotAllowed(origin));
        }
        Ok(())
    }
}

impl RoutePolicy for AllowedHosts {
    type Kept = ();

    fn before(self: &Arc<Self>, request: &mut Request) -> Result<(), Response> {
        self.check(request.uri(), request.headers())
            .map_err(IntoResponse::into_response)
    }

    fn after((): (), _answer: &Response) {}
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body;
    use axum::http::StatusCode;
    use rmcp::ServerHandler;
    use rmcp::transport::streamable_http_server::StreamableHttpService;
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use tower::Service;

    use super::*;

    /// A handler with nothing: the SDK's transport checks the headers before it is asked.
    #[derive(Clone)]
    struct Nothing;

    impl ServerHandler for Nothing {}

    /// Whether the SDK's own check lets the request through, configured as `super::service`
    /// configures it.
    async fn sdk_admits(allowed: &[String], host: Option<&str>, origin: Option<&str>) -> bool {
        let config = super::super::transport_config(allowed, 1 << 20);
        let mut service = StreamableHttpService::new(
            || Ok(Nothing),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let response = Service::call(&mut service, request(host, origin)).await;
        let response: Result<_, Infallible> = response;
        let status = response.unwrap().status();
        status != StatusCode::FORBIDDEN && status != StatusCode::BAD_REQUEST
    }

    fn request(host: Option<&str>, origin: Option<&str>) -> Request {
        let mut request = Request::post("http://127.0.0.1:8080/mcp")
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(host) = host {
            request = request.header("host", host);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request
            .body(Body::from(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            ))
            .unwrap()
    }

    #[tokio::test]
    async fn the_check_agrees_with_the_sdks() {
        let lists: [&[&str]; 3] = [
            &["127.0.0.1", "localhost"],
            &["0.0.0.0", "mcp.example.com", "::1", "Tools.Internal:8443"],
            &["::1", "localhost", "[fe80::1]"],
        ];
        let hosts = [
            None,
            Some("localhost"),
            Some("LOCALHOST:8080"),
            Some("127.0.0.1:9"),
            Some("[::1]:8080"),
            Some("[::2]"),
            Some("mcp.example.com"),
            Some("mcp.example.com.evil.example"),
            Some("evil.example:8080"),
            Some("tools.internal:8443"),
            Some("tools.internal:8444"),
            Some("tools.internal"),
            Some("[fe80::1]:1"),
            Some("a b"),
            Some(""),
        ];
        let origins = [
            None,
            Some("http://localhost"),
            Some("https://localhost:3000"),
            Some("HTTP://LOCALHOST:1"),
            Some("ws://localhost"),
            Some("http://evil.example"),
            Some("null"),
            Some("localhost"),
            Some(""),
            Some("http://[::1]:6274"),
            Some("https://mcp.example.com"),
            Some("https://tools.internal:8443"),
            Some("http://127.0.0.1:6274"),
            Some("http://[fe80::1]"),
        ];
        for list in lists {
            let list: Vec<String> = list.iter().map(|h| (*h).to_owned()).collect();
            let ours = AllowedHosts::new(&list);
            for host in hosts {
                for origin in origins {
                    let request = request(host, origin);
                    let admitted = ours.check(request.uri(), request.headers()).is_ok();
                    assert_eq!(
                        admitted,
                        sdk_admits(&list, host, origin).await,
                        "{list:?}, Host {host:?}, Origin {origin:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_refusal_names_what_to_list() {
        let ours = AllowedHosts::new(&["127.0.0.1".into()]);
        let request = request(Some("Evil.Example:8080"), None);
        let err = ours.check(request.uri(), request.headers()).unwrap_err();
        assert_eq!(err.code(), "forbidden");
        let message = err.to_object().message;
        assert!(message.contains("`evil.example`"), "{message}");
        assert!(message.contains("[mcp] allowed_hosts"), "{message}");
    }
}
