//! Where an operation's requests go: the entry's `base_url`, else the first of the document's
//! `servers` (its variables at their defaults, a relative URL read against the document's).
//!
//! A server the document names is the document author's word, not the operator's: one on a
//! loopback, private or link-local address (a cloud's metadata service, an admin port), or not
//! `https` (the credentials would travel in the clear), is refused unless the entry's
//! `base_url` says where to send requests. A host name is not resolved here: only `localhost`,
//! `*.localhost`, `*.internal` and `*.local` are known private by their name.

use std::net::IpAddr;

use serde_json::Value;

use super::config::Source;
use super::document::Document;

/// The base URL of requests: the entry's, else the first usable server of `servers`; `None`
/// when neither says (an operation may still have servers of its own).
pub(super) fn base(
    document: &Document,
    source: &Source,
    servers: Option<&Value>,
) -> Result<Option<url::Url>, String> {
    if let Some(base) = &source.base_url {
        return Ok(Some(base.clone()));
    }
    let Some(server) = servers
        .and_then(Value::as_array)
        .and_then(|servers| servers.first())
    else {
        return Ok(None);
    };
    let mut written = server
        .get("url")
        .and_then(Value::as_str)
        .ok_or("the document's first server has no `url`")?
        .to_owned();
    if let Some(Value::Object(variables)) = server.get("variables") {
        for (name, variable) in variables {
            let value = variable
                .get("default")
                .and_then(Value::as_str)
                .unwrap_or_default();
            written = written.replace(&format!("{{{name}}}"), value);
        }
    }
    let mut url = match (url::Url::parse(&written), &document.url) {
        (Ok(url), _) => url,
        (Err(url::ParseError::RelativeUrlWithoutBase), Some(from)) => from
            .join(&written)
            .map_err(|err| format!("the server `{written}` is not a URL: {err}"))?,
        (Err(url::ParseError::RelativeUrlWithoutBase), None) => {
            return Err(format!(
                "the document's server `{written}` is relative to a document read from a file; \
                 set `base_url`"
            ));
        }
        (Err(err), _) => return Err(format!("the server `{written}` is not a URL: {err}")),
    };
    // Requests carry their own query: not the document URL's (a token, maybe).
    url.set_query(None);
    url.set_fragment(None);
    // A server the document chooses carries the entry's credentials: never in the clear.
    if url.scheme() != "https" {
        return Err(format!(
            "the document's server `{url}` is not https://; set `base_url` to send requests \
             there anyway"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the document's server carries credentials; set `base_url`".into());
    }
    if is_private(&url) {
        return Err(format!(
            "the document's server `{url}` is on a loopback, private or link-local address, \
             which a document may not send requests to; set `base_url` to that URL if it is \
             where this API is"
        ));
    }
    Ok(Some(url))
}

/// Whether `url`'s host is this machine, a private network or a link-local address.
pub(super) fn is_private(url: &url::Url) -> bool {
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => {
            let segments = ip.segments();
            // NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits.
            let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
            match ip.to_ipv4() {
                Some(v4) if !ip.is_loopback() => IpAddr::V4(v4),
                _ if nat64 => IpAddr::V4(std::net::Ipv4Addr::from(
                    (u32::from(segments[6]) << 16) | u32::from(segments[7]),
                )),
                _ => IpAddr::V6(ip),
            }
        }
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            return name == "localhost"
                || name.ends_with(".localhost")
                || name.ends_with(".internal")
                || name.ends_with(".local");
        }
        None => return true,
    };
    match ip {
        IpAddr::V4(ip) => {
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
                // 0.0.0.0/8, "this network".
                || ip.octets()[0] == 0
                // 100.64.0.0/10, shared address space.
                || (ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(ip) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || (ip.segments()[0] & 0xfe00) == 0xfc00
                || (ip.segments()[0] & 0xffc0) == 0xfe80
                // fec0::/10, the old site-local.
                || (ip.segments()[0] & 0xffc0) == 0xfec0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_hosts_are_told_apart() {
        for url in [
            "http://127.0.0.1:8080/",
            "http://169.254.169.254/latest",
            "http://10.1.2.3/",
            "http://[::1]/",
            "http://[::ffff:192.168.1.1]/",
            "http://[fd00::1]/",
            "http://localhost/",
            "http://metadata.google.internal/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[::a9fe:a9fe]/",
            "http://0.1.2.3/",
            "http://[fec0::1]/",
        ] {
            assert!(is_private(&url::Url::parse(url).unwrap()), "{url}");
        }
        for url in ["https://api.github.com/", "http://93.184.216.34/"] {
            assert!(!is_private(&url::Url::parse(url).unwrap()), "{url}");
        }
    }
}
