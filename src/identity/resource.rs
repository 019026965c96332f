//! This server as an OAuth 2.1 resource server (RFC 9728, as MCP's authorization asks): its
//! canonical URL (`[auth] resource_url`, the URL of its `/mcp`), the Protected Resource Metadata
//! document that names the authorization servers a client gets tokens from, and the challenge
//! every `401` carries so that a client finds that document from the refusal alone.

use axum::http::HeaderValue;
use serde_json::{Value, json};
use url::Url;

use super::IssuerError;
use super::config::secure_url;

/// The resource this server is, and what it tells clients about it.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    /// Where the metadata document is served, on this server: the well-known path for the
    /// resource's own path (`/.well-known/oauth-protected-resource/mcp`), and the bare one.
    pub(crate) paths: Vec<String>,
    /// The document.
    pub(crate) document: Value,
    /// `WWW-Authenticate` of a request without credentials, and of one whose token is refused.
    pub(crate) challenge: HeaderValue,
    pub(crate) invalid: HeaderValue,
    /// The document's URL, for the `insufficient_scope` challenge.
    metadata_url: String,
    /// What a `401` asks for: the scopes that make a caller.
    asked: Vec<String>,
}

impl Resource {
    /// The resource at `url`, whose tokens `authorization_servers` issue with `scopes`; a `401`
    /// asks for `asked` (the scopes that make a caller).
    pub(crate) fn new(
        url: &str,
        authorization_servers: Vec<String>,
        mut scopes: Vec<String>,
        mut asked: Vec<String>,
    ) -> Result<Resource, IssuerError> {
        let parsed: Url =
            secure_url(url).map_err(|why| IssuerError(format!("[auth] resource_url {why}")))?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(IssuerError(
                "[auth] resource_url: no query or fragment in a resource's URL (RFC 8707)".into(),
            ));
        }
        // Never offered: a refresh token is the client's business with its provider.
        for scopes in [&mut scopes, &mut asked] {
            scopes.retain(|scope| scope != "offline_access");
            scopes.sort();
            scopes.dedup();
        }
        let path = parsed.path().trim_end_matches('/');
        let well_known = "/.well-known/oauth-protected-resource";
        let mut paths = vec![format!("{well_known}{path}")];
        if !path.is_empty() {
            paths.push(well_known.to_owned());
        }
        let mut origin = parsed.clone();
        origin.set_path(&paths[0]);
        let metadata_url = origin.to_string();
        let document = json!({
            "resource": url,
            "authorization_servers": authorization_servers,
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "toolgate",
        });
        let scope = asked.join(" ");
        let params = if scope.is_empty() {
            format!("resource_metadata=\"{metadata_url}\"")
        } else {
            format!("resource_metadata=\"{metadata_url}\", scope=\"{scope}\"")
        };
        let header = |text: String| {
            HeaderValue::try_from(text).map_err(|_| {
                IssuerError("[auth] resource_url or a scope cannot go in a header".into())
            })
        };
        Ok(Resource {
            paths,
            document,
            challenge: header(format!("Bearer {params}"))?,
            invalid: header(format!("Bearer error=\"invalid_token\", {params}"))?,
            metadata_url,
            asked,
        })
    }

    /// `WWW-Authenticate` of a `403` to a token that lacks some of `required` (RFC 6750 3.1, as
    /// MCP's step-up authorization reads it): every scope the operation needs in one challenge,
    /// the tool's and those that make a caller, so a client asks for all of them at once.
    pub(crate) fn insufficient(&self, required: &[String]) -> Option<HeaderValue> {
        let mut scopes: Vec<&str> = self
            .asked
            .iter()
            .chain(required)
            .map(String::as_str)
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        HeaderValue::try_from(format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
            scopes.join(" "),
            self.metadata_url
        ))
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_names_the_servers_and_the_challenge_points_at_it() {
        let resource = Resource::new(
            "https://tools.example.com/mcp",
            vec!["https://id.example.com".into()],
            vec![
                "tools:call".into(),
                "offline_access".into(),
                "tools:call".into(),
                "refunds".into(),
            ],
            vec!["tools:call".into()],
        )
        .unwrap();
        assert_eq!(
            resource.paths,
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            resource.document["scopes_supported"],
            json!(["refunds", "tools:call"])
        );
        assert_eq!(
            resource.challenge,
            "Bearer resource_metadata=\"https://tools.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"tools:call\""
        );
        assert!(
            resource
                .invalid
                .to_str()
                .unwrap()
                .starts_with("Bearer error=\"invalid_token\", resource_metadata=")
        );
        assert_eq!(
            resource.insufficient(&["refunds:write".into()]).unwrap(),
            "Bearer error=\"insufficient_scope\", scope=\"refunds:write tools:call\", \
             resource_metadata=\"https://tools.example.com/.well-known/oauth-protected-resource/mcp\""
        );
        assert!(Resource::new("http://tools.example.com/mcp", vec![], vec![], vec![]).is_err());
        assert!(
            Resource::new("https://tools.example.com/mcp?x=1", vec![], vec![], vec![]).is_err()
        );
    }
}
