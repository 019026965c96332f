//! The document's security schemes, met from the entry: a scheme named in `credentials` is
//! filled with its secret (a bearer token as `Authorization: Bearer`, an API key in its header
//! or query parameter, a `basic` scheme's `user:password`); a bearer-like scheme (`http`
//! bearer, `oauth2`, `openIdConnect`) is also met by the caller's exchanged token when the
//! entry acts as its caller (`[upstreams.auth]`), or by an `Authorization` of the entry's
//! `headers`. An operation takes the first of its requirements that can be met; one none of
//! whose requirements can be is skipped, named.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use super::config::Source;
use super::document::Document;

/// A credential a request carries.
pub(crate) enum Apply {
    /// A header (an API key, or `Authorization`).
    Header(reqwest::header::HeaderName, String),
    /// A query parameter (an API key).
    Query(String, String),
    /// The caller's exchanged token, as `Authorization: Bearer`.
    Caller,
}

/// How one scheme is met, if it can be.
#[derive(Clone)]
enum Met {
    Apply(Vec<(String, String)>, Vec<(String, String)>, bool),
    /// Met by what every request carries already (the entry's `headers`).
    Already,
    Not(String),
}

/// The document's schemes, each with how it is met.
pub(super) struct Schemes {
    met: BTreeMap<String, Met>,
    /// The document's default requirements.
    default: Option<Value>,
}

impl Schemes {
    pub(super) fn new(document: &Document, source: &Source, exchange: bool) -> Schemes {
        let credential = |name: &str| {
            source
                .credentials
                .iter()
                .find(|(scheme, _)| scheme == name)
                .map(|(_, value)| value.clone())
        };
        let has_header = |header: &str| {
            source
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case(header))
        };
        let mut met = BTreeMap::new();
        let declared = document
            .root
            .pointer("/components/securitySchemes")
            .and_then(Value::as_object);
        for (name, scheme) in declared.into_iter().flatten() {
            let kind = scheme.get("type").and_then(Value::as_str).unwrap_or("");
            let http = scheme
                .get("scheme")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_ascii_lowercase();
            let bearer_like =
                matches!(kind, "oauth2" | "openIdConnect") || (kind == "http" && http == "bearer");
            let how = match (kind, credential(name)) {
                ("apiKey", Some(value)) => {
                    let key = scheme.get("name").and_then(Value::as_str).unwrap_or("");
                    match scheme.get("in").and_then(Value::as_str) {
                        Some("header") => Met::Apply(vec![(key.into(), value)], vec![], false),
                        Some("query") => Met::Apply(vec![], vec![(key.into(), value)], false),
                        _ => Met::Not(format!(
                            "its security scheme `{name}` is an API key in a cookie, which \
                             toolgate does not send"
                        )),
                    }
                }
                ("apiKey", None) => {
                    let key = scheme.get("name").and_then(Value::as_str).unwrap_or("");
                    let in_header = scheme.get("in").and_then(Value::as_str) == Some("header");
                    if in_header && has_header(key) {
                        Met::Already
                    } else {
                        Met::Not(format!(
                            "its security scheme `{name}` (an API key) has no secret: set \
                             `credentials.{name}`"
                        ))
                    }
                }
                ("http", Some(value)) if http == "basic" => {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
                    Met::Apply(
                        vec![("authorization".into(), format!("Basic {encoded}"))],
                        vec![],
                        false,
                    )
                }
                (_, Some(value)) if bearer_like => Met::Apply(
                    vec![("authorization".into(), format!("Bearer {value}"))],
                    vec![],
                    false,
                ),
                (_, None) if bearer_like && exchange => Met::Apply(vec![], vec![], true),
                (_, _) if (bearer_like || http == "basic") && has_header("authorization") => {
                    Met::Already
                }
                (_, None) if bearer_like || http == "basic" => Met::Not(format!(
                    "its security scheme `{name}` has no credential: set `credentials.{name}`, \
                     or act as the caller with `[upstreams.auth]`"
                )),
                _ => Met::Not(format!(
                    "its security scheme `{name}` is of a kind toolgate does not fill ({kind})"
                )),
            };
            met.insert(name.clone(), how);
        }
        Schemes {
            met,
            default: document.root.get("security").cloned(),
        }
    }

    /// What a request of `operation` carries: the first of its requirements that can be met.
    pub(super) fn apply(&self, operation: &Value) -> Result<Vec<Apply>, String> {
        let requirements = operation.get("security").or(self.default.as_ref());
        let Some(Value::Array(requirements)) = requirements else {
            return Ok(Vec::new());
        };
        if requirements.is_empty() {
            return Ok(Vec::new());
        }
        let mut why = None;
        'requirement: for requirement in requirements {
            let Some(requirement) = requirement.as_object() else {
                continue;
            };
            let mut out = Vec::new();
            for scheme in requirement.keys() {
                match self.met.get(scheme) {
                    Some(Met::Apply(headers, query, caller)) => {
                        for (name, value) in headers {
                            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                                .map_err(|_| {
                                    format!("its security scheme `{scheme}` names no header")
                                })?;
                            out.push(Apply::Header(name, value.clone()));
                        }
                        for (name, value) in query {
                            out.push(Apply::Query(name.clone(), value.clone()));
                        }
                        if *caller {
                            out.push(Apply::Caller);
                        }
                    }
                    Some(Met::Already) => {}
                    Some(Met::Not(reason)) => {
                        why.get_or_insert_with(|| reason.clone());
                        continue 'requirement;
                    }
                    None => {
                        why.get_or_insert_with(|| {
                            format!("it requires the security scheme `{scheme}`, which the document does not declare")
                        });
                        continue 'requirement;
                    }
                }
            }
            return Ok(out);
        }
        Err(why.unwrap_or_else(|| "its security requirements cannot be met".into()))
    }
}
