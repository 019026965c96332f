//! Where a webhook may post: the checks against SSRF.
//!
//! A receiver's URL comes from the configuration, but the name in it resolves to whatever DNS
//! says at the time, so one check at start-up is not enough: a name that later resolves to
//! `127.0.0.1` or `169.254.169.254` (cloud metadata) would let a webhook reach the inside of the
//! network. Hence three checks: an address literal is refused when the URL is read, a name when
//! the server starts ([`check_resolved`]), and the client resolves names itself and connects
//! only to the addresses it checked ([`client`]), at every send. `allow_private` lifts all three.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::{DeliverySettings, WebhookError};

/// Whether an address is one a webhook may not reach unless it allows private targets:
/// loopback, private, link-local (cloud metadata lives at 169.254.169.254), unique-local,
/// unspecified, and the IPv4 forms of those inside IPv6.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                // 100.64.0.0/10, carrier-grade NAT, and 0.0.0.0/8.
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
                || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                // fc00::/7 unique-local, fe80::/10 link-local.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
            // fd00:ec2::254, AWS's metadata over IPv6, is unique-local already.
        }
    }
}

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

/// The HTTP client of one webhook: it follows no redirect (a receiver could point one inside)
/// and resolves names through [`GuardedResolver`].
pub(super) fn client(
    settings: &DeliverySettings,
    allow_private: bool,
) -> Result<reqwest::Client, WebhookError> {
    super::install_crypto();
    reqwest::Client::builder()
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver { allow_private }))
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
    use super::*;

    #[test]
    fn private_targets_are_recognised() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }
}
