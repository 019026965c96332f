//! What every request to a provider (an identity provider's endpoints, Slack's API) shares: a
//! client bounded in time that follows no redirect, an answer read up to a bound, a form
//! POSTed as a client with HTTP Basic, and an issuer's discovery document, which must name
//! that issuer.

use serde_json::Value;
use url::Url;

/// An HTTP client for a provider's endpoints (an identity provider's, Slack's): every request
/// bounded by `timeout`, connecting included, and following no redirect (one could lead off
/// https, or somewhere the configured URL is not).
pub(crate) fn bounded_client(timeout: std::time::Duration) -> Result<reqwest::Client, String> {
    super::install_crypto();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| format!("cannot build an HTTP client: {err}"))
}

/// The body of `response`, refused past `max_bytes` (its `Content-Length` first, then as it
/// arrives).
pub(crate) async fn read_bounded(
    mut response: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|length| length > max_bytes as u64)
    {
        return Err(format!("an answer larger than {max_bytes} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|err| err.to_string())? {
        if body.len() + chunk.len() > max_bytes {
            return Err(format!("an answer larger than {max_bytes} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A form `body` POSTed to a provider's endpoint, answered in JSON; as the client `client_id`
/// with HTTP Basic when `basic` holds its secret (the id and secret form-encoded before they
/// are joined, RFC 6749 2.3.1).
pub(crate) fn form_post(
    client: &reqwest::Client,
    url: Url,
    basic: Option<(&str, &str)>,
    body: String,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(url)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(reqwest::header::ACCEPT, "application/json");
    if let Some((client_id, secret)) = basic {
        request = request.basic_auth(form_encoded(client_id), Some(form_encoded(secret)));
    }
    request.body(body)
}

/// `value` as `application/x-www-form-urlencoded` writes it.
pub(crate) fn form_encoded(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The discovery document of the issuer `issuer` (its URL, as tokens name it): OpenID
/// Connect's, else RFC 8414's (`/.well-known/oauth-authorization-server` inserted before the
/// issuer's path), at most `max_bytes`. A document must name this issuer, so that a document
/// of another cannot point here; one that is missing, unreadable or about another issuer
/// leaves the next place to try.
pub(crate) async fn discovery_document(
    client: &reqwest::Client,
    issuer: &str,
    max_bytes: usize,
) -> Result<Value, String> {
    let issuer_url = Url::parse(issuer).map_err(|err| format!("the issuer {issuer}: {err}"))?;
    let oidc = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let mut oauth = issuer_url;
    let path = oauth.path().trim_end_matches('/').to_owned();
    oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    let mut last_error = String::new();
    for candidate in [oidc, oauth.to_string()] {
        match document_at(client, &candidate, issuer, max_bytes).await {
            Ok(document) => return Ok(document),
            Err(why) => last_error = format!("{candidate}: {why}"),
        }
    }
    Err(format!("no discovery document: {last_error}"))
}

/// The document at `url`, if it is JSON naming `issuer`.
async fn document_at(
    client: &reqwest::Client,
    url: &str,
    issuer: &str,
    max_bytes: usize,
) -> Result<Value, String> {
    let response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|err| {
            if err.is_timeout() {
                "it did not answer in time".to_owned()
            } else if err.is_connect() {
                "it cannot be reached".to_owned()
            } else {
                "the request failed".to_owned()
            }
        })?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let document: Value = serde_json::from_slice(&read_bounded(response, max_bytes).await?)
        .map_err(|err| format!("not JSON: {err}"))?;
    if document.get("issuer").and_then(Value::as_str) != Some(issuer) {
        return Err("it names another issuer".into());
    }
    Ok(document)
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_are_form_encoded_for_basic_auth() {
        assert_eq!(super::form_encoded("toolgate"), "toolgate");
        assert_eq!(super::form_encoded("a b:c%d+e"), "a+b%3Ac%25d%2Be");
    }
}
