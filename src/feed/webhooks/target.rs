//! Where a webhook may post: the checks against SSRF.
//!
//! A receiver's URL comes from the configuration, but the name in it resolves to whatever DNS
//! says at the time, so one check at start-up is not enough: a name that later resolves to
//! `127.0.0.1` or `169.254.169.254` (cloud metadata) would let a webhook reach the inside of the
//! network. Hence three checks: an address literal is refused when the URL is read, a name when
//! the server starts ([`check_resolved`]), and the client resolves names itself and connects
//! only to the addresses it checked ([`client`]), at every send. `allow_private` lifts all three.
//!
//! A proxy would connect wherever the request says, past all three, so the client ignores the
//! proxy variables of the environment (`HTTP_PROXY`, `ALL_PROXY`, ...: set for other programs,
//! they would silently route webhooks around these checks). Only a proxy configured for the
//! webhooks (`[webhook_delivery] proxy`) is used, and it is checked like a target; the names of
//! targets are then resolved by the proxy, which must keep them from the inside itself.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::private::is_private;
use super::{DeliverySettings, WebhookError};

/// `url`, read: refused unless it is http(s) with a host, and (unless `allow_private`) when its
/// host is a private address literal.
pub(super) fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, WebhookError> {
    let url = reqwest::Url::parse(url).map_err(|err| WebhookError(format!("not a URL: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(WebhookError(
            "must be an http or https URL with a host".into(),
        ));
    }
    if !allow_private
        && let Some(ip) = host_ip(&url)
        && is_private(ip)
    {
        return Err(WebhookError(format!(
            "{ip} is a private address; set allow_private = true to post to it"
        )));
    }
    Ok(url)
}

/// A proxy's URL, read: checked as a target's is, since the client connects to it.
pub(super) fn check_proxy(proxy: &str, allow_private: bool) -> Result<reqwest::Url, WebhookError> {
    check_url(proxy, allow_private)
        .map_err(|err| WebhookError(format!("the proxy {}: {err}", shown(proxy))))
}

/// Refuses a host whose name resolves to a private address (unless allowed): at start-up.
/// A name that does not resolve now is let through; every send checks again.
pub(super) async fn check_resolved(
    url: &reqwest::Url,
    allow_private: bool,
) -> Result<(), WebhookError> {
    if allow_private || host_ip(url).is_some() {
        return Ok(());
    }
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(443);
    if let Ok(addrs) = tokio::net::lookup_host((host, port)).await
        && let Some(addr) = addrs.into_iter().find(|addr| is_private(addr.ip()))
    {
        return Err(WebhookError(format!(
            "{host} resolves to the private address {}; set allow_private = true to post to it",
            addr.ip()
        )));
    }
    Ok(())
}

/// The HTTP client of one webhook: it follows no redirect (a receiver could point one inside),
/// resolves names through [`GuardedResolver`], and goes through the configured proxy or none
/// (never one named by the environment).
pub(super) fn client(
    settings: &DeliverySettings,
    allow_private: bool,
) -> Result<reqwest::Client, WebhookError> {
    crate::base::install_crypto();
    let builder = reqwest::Client::builder()
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver { allow_private }));
    let builder = match &settings.proxy {
        // A proxy given to the builder replaces the environment's.
        Some(proxy) => builder.proxy(
            reqwest::Proxy::all(proxy.clone())
                .map_err(|_| WebhookError("the proxy is not a usable URL".into()))?,
        ),
        None => builder.no_proxy(),
    };
    builder
        .build()
        .map_err(|err| WebhookError(format!("cannot build an HTTP client: {err}")))
}

/// Resolves names for one webhook's client, refusing the addresses it may not reach.
struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|addr| allow_private || !is_private(addr.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(format!(
                    "{host} resolves only to private addresses, which this webhook may not reach"
                )
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// `url` as logs and errors may show it: scheme, host and port only. A receiver's path or
/// query often is its secret (a Slack-style URL carries the token in its path), and user
/// information is a password, so neither is ever shown.
pub(super) fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{}://{host}:{port}", url.scheme()),
            (Some(host), None) => format!("{}://{host}", url.scheme()),
            _ => format!("a {} URL", url.scheme()),
        },
        Err(_) => "an unreadable URL".to_owned(),
    }
}

/// The host of `url` when it is an address literal.
fn host_ip(url: &reqwest::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_url_is_shown_as_scheme_host_and_port_only() {
        for (url, expected) in [
            (
                "https://hooks.slack.com/services/T000/B000/XXXXSECRET",
                "https://hooks.slack.com:443",
            ),
            (
                "http://127.0.0.1:9000/hook?token=SECRET",
                "http://127.0.0.1:9000",
            ),
            (
                "https://user:SECRET@example.com/x#SECRET",
                "https://example.com:443",
            ),
            ("http://[::1]:8080/SECRET", "http://[::1]:8080"),
            ("not a url SECRET", "an unreadable URL"),
        ] {
            assert_eq!(shown(url), expected, "{url}");
            assert!(!shown(url).contains("SECRET"));
        }
    }
}
