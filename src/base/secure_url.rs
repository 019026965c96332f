//! A provider's URL, held to `https` (plain `http` only to this machine): identity providers'
//! endpoints, and an upstream's token endpoint.

use url::Url;

/// `url`, if it is `https`, or `http` to a loopback address (a provider on this machine).
pub(crate) fn secure_url(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|err| format!("`{url}` is not a URL: {err}"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("`{url}`: no credentials in the URL"));
    }
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        _ => Err(format!(
            "`{url}` must be https (http only to a loopback address)"
        )),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}
