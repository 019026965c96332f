//! One call of an operation, over HTTP: the request built from the call's input (path
//! parameters encoded, query and header parameters written in their style, the body as JSON or
//! form fields), sent without following redirects, and its answer read within a size bound.
//!
//! A `2xx` answer's JSON (or its text, or `null` for no body) is the output; a `4xx` is the
//! API refusing (its status and its message, bounded); a `429`, a `5xx` or a request that failed
//! on the way is the API unavailable, saying whether the request may have arrived, so the
//! lifecycle retries by effect.

use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::{Map, Value};

use super::operations::{BODY, Media, Operation, Place, Style};
use super::security::Apply;

/// The largest answer read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The most characters of an API's error answer kept.
const MAX_MESSAGE_CHARS: usize = 2000;
/// What a path parameter's value is encoded with: everything but RFC 3986's unreserved.
const PATH_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Why a call did not produce an output.
pub(crate) enum Failure {
    /// The API answered, and not with a success: a `4xx`.
    Refused(String),
    /// The API answered, and what it did cannot be delivered: a redirect (not followed), a
    /// `2xx` too large or not the JSON it says. A write it answered so has happened, maybe.
    Undelivered(String),
    /// The API could not be reached, or was not able to answer.
    Unavailable {
        message: String,
        may_have_run: bool,
        retry_after: Option<Duration>,
    },
    /// The input cannot be written into a request.
    Input(String),
}

/// Sends one call of `operation` with `input`, `headers` added (the attestation, the trace,
/// the idempotency key) and `caller` as the bearer where the operation takes the caller's.
pub(crate) async fn send(
    client: &reqwest::Client,
    operation: &Operation,
    input: &Map<String, Value>,
    headers: Vec<(HeaderName, String)>,
    caller: Option<&str>,
) -> Result<Value, Failure> {
    let request = build(client, operation, input, headers, caller)?;
    let mut response = client.execute(request).await.map_err(|err| {
        let may_have_run = !err.is_connect() && !err.is_builder();
        Failure::Unavailable {
            message: format!("the request failed: {}", err.without_url()),
            may_have_run,
            retry_after: None,
        }
    })?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(|seconds| Duration::from_secs(seconds.min(3600)));
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(super::names::is_json);
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(Failure::Undelivered(format!(
                        "The API answered {status} with a body larger than {} MiB.",
                        MAX_RESPONSE_BYTES / (1024 * 1024)
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(err) => {
                return Err(Failure::Unavailable {
                    message: format!("the answer broke off: {}", err.without_url()),
                    may_have_run: true,
                    retry_after: None,
                });
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    if status.is_success() {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        if !json {
            return Ok(Value::String(text.into_owned()));
        }
        return serde_json::from_slice(&bytes).map_err(|err| {
            Failure::Undelivered(format!(
                "The API answered {status} with a body that is not the JSON it says: {err}."
            ))
        });
    }
    if status.is_redirection() {
        // Where it points, without its query (a redirect may echo a key sent in the query).
        let to = location.map(|to| bounded(to.split(['?', '#']).next().unwrap_or_default()));
        return Err(Failure::Undelivered(format!(
            "The API answered {status}{}; redirects are not followed.",
            to.map(|to| format!(" to {to}")).unwrap_or_default()
        )));
    }
    let message = bounded(text.trim());
    let said = if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    };
    if status.as_u16() == 429 || status.is_server_error() {
        return Err(Failure::Unavailable {
            message: format!("The API answered {status}{said}"),
            // A 429 is the API saying it did not take the request.
            may_have_run: status.as_u16() != 429,
            retry_after,
        });
    }
    Err(Failure::Refused(format!("The API answered {status}{said}")))
}

/// The request of one call.
fn build(
    client: &reqwest::Client,
    operation: &Operation,
    input: &Map<String, Value>,
    headers: Vec<(HeaderName, String)>,
    caller: Option<&str>,
) -> Result<reqwest::Request, Failure> {
    let mut path = operation.path.clone();
    let mut query: Vec<(String, String)> = Vec::new();
    // The input's header parameters first: what the entry and toolgate send wins over them.
    let mut request_headers: Vec<(HeaderName, String)> = Vec::new();
    for param in &operation.params {
        let Some(value) = input.get(&param.name).filter(|v| !v.is_null()) else {
            if param.place == Place::Path {
                return Err(Failure::Input(format!(
                    "the path parameter `{}` has no value",
                    param.name
                )));
            }
            continue;
        };
        // A parameter described by `content` is sent as its JSON text; any other as it is.
        let json;
        let value = if param.json {
            json = Value::String(value.to_string());
            &json
        } else {
            value
        };
        match param.place {
            Place::Path => {
                let written = path_value(&param.name, value, param.style, param.explode);
                // A segment of dots would be read as "this" or "the parent" (encoded or not,
                // URLs normalise it): a value could move the request to another route.
                if written.is_empty() || written.split(['.', ',', ';', '=']).all(str::is_empty) {
                    return Err(Failure::Input(format!(
                        "the path parameter `{}` must not be empty nor only dots",
                        param.name
                    )));
                }
                path = path.replace(&format!("{{{}}}", param.name), &written);
            }
            Place::Query => query.extend(query_pairs(&param.name, value, param)),
            Place::Header => {
                let name = HeaderName::from_bytes(param.name.as_bytes()).map_err(|_| {
                    Failure::Input(format!("`{}` is not a header name", param.name))
                })?;
                request_headers.push((name, joined(value, ",", param.explode, false)));
            }
        }
    }
    let mut url = operation.base.clone();
    let joined_path = format!("{}{}", operation.base.path().trim_end_matches('/'), path);
    url.set_path(&joined_path);
    for apply in &operation.auth {
        if let Apply::Query(name, value) = apply {
            // The credential's name is the credential's alone: no input sends it too.
            query.retain(|(sent, _)| sent != name);
            query.push((name.clone(), value.clone()));
        }
    }
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    let mut builder = client.request(operation.method.clone(), url);
    request_headers.extend(headers);
    for apply in &operation.auth {
        match apply {
            Apply::Header(name, value) => request_headers.push((name.clone(), value.clone())),
            Apply::Caller => {
                if let Some(bearer) = caller {
                    request_headers
                        .push((reqwest::header::AUTHORIZATION, format!("Bearer {bearer}")));
                }
            }
            Apply::Query(..) => {}
        }
    }
    // One value per header, the last one given winning: a credential over the entry's own
    // header of that name.
    let mut map = reqwest::header::HeaderMap::new();
    map.insert(
        reqwest::header::ACCEPT,
        HeaderValue::from_static("application/json, */*;q=0.5"),
    );
    for (name, value) in request_headers {
        let value = HeaderValue::from_str(&value).map_err(|_| {
            Failure::Input(format!(
                "the value of header `{name}` cannot be sent (a line break, or a character \
                 outside visible ASCII)"
            ))
        })?;
        map.insert(name, value);
    }
    builder = builder.headers(map);
    if let (Some(body), Some(value)) = (&operation.body, input.get(BODY)) {
        builder = match body.media {
            Media::Json => builder
                .header(CONTENT_TYPE, body.content_type.as_str())
                .body(serde_json::to_vec(value).unwrap_or_default()),
            Media::Form => builder.form(&fields(value)),
            Media::Multipart => {
                let mut form = reqwest::multipart::Form::new();
                for (name, text) in fields(value) {
                    form = form.text(name, text);
                }
                builder.multipart(form)
            }
        };
    }
    builder.build().map_err(|err| {
        Failure::Input(format!(
            "the request cannot be built: {}",
            err.without_url()
        ))
    })
}

/// A value as text: a string as it is, a number or a boolean written, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// An array's items or an object's members (`key,value` or `key=value` when exploded) joined by
/// `separator`; a scalar as [`text`]. `encode` percent-encodes each part for a path.
fn joined(value: &Value, separator: &str, explode: bool, encode: bool) -> String {
    let part = |text: String| {
        if encode {
            utf8_percent_encode(&text, PATH_VALUE).to_string()
        } else {
            text
        }
    };
    match value {
        Value::Array(items) => items
            .iter()
            .map(|item| part(text(item)))
            .collect::<Vec<_>>()
            .join(separator),
        Value::Object(members) => members
            .iter()
            .map(|(key, item)| {
                if explode {
                    format!("{}={}", part(key.clone()), part(text(item)))
                } else {
                    format!("{}{separator}{}", part(key.clone()), part(text(item)))
                }
            })
            .collect::<Vec<_>>()
            .join(separator),
        scalar => part(text(scalar)),
    }
}

/// A path parameter's value, in its style, encoded.
fn path_value(name: &str, value: &Value, style: Style, explode: bool) -> String {
    match style {
        Style::Label => {
            let separator = if explode { "." } else { "," };
            format!(".{}", joined(value, separator, explode, true))
        }
        Style::Matrix => match value {
            Value::Array(items) if explode => items
                .iter()
                .map(|item| format!(";{name}={}", joined(item, ",", false, true)))
                .collect(),
            Value::Object(_) if explode => format!(";{}", joined(value, ";", true, true)),
            _ => format!(";{name}={}", joined(value, ",", false, true)),
        },
        _ => joined(value, ",", explode, true),
    }
}

/// A query parameter's pairs, in its style.
fn query_pairs(
    name: &str,
    value: &Value,
    param: &super::operations::Param,
) -> Vec<(String, String)> {
    match (param.style, value) {
        (Style::DeepObject, Value::Object(members)) => members
            .iter()
            .map(|(key, item)| (format!("{name}[{key}]"), text(item)))
            .collect(),
        (Style::Form, Value::Array(items)) if param.explode => items
            .iter()
            .map(|item| (name.to_owned(), text(item)))
            .collect(),
        (Style::Form, Value::Object(members)) if param.explode => members
            .iter()
            .map(|(key, item)| (key.clone(), text(item)))
            .collect(),
        (Style::SpaceDelimited, Value::Array(_) | Value::Object(_)) => {
            vec![(name.to_owned(), joined(value, " ", false, false))]
        }
        (Style::PipeDelimited, Value::Array(_) | Value::Object(_)) => {
            vec![(name.to_owned(), joined(value, "|", false, false))]
        }
        _ => vec![(name.to_owned(), joined(value, ",", false, false))],
    }
}

/// A form body's fields: each member of the object, an array's items as repeated fields, an
/// object as JSON text.
fn fields(value: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, item) in value.as_object().into_iter().flatten() {
        match item {
            Value::Array(items) => out.extend(items.iter().map(|i| (name.clone(), text(i)))),
            Value::Null => {}
            other => out.push((name.clone(), text(other))),
        }
    }
    out
}

/// Checks that a form body's schema holds plain fields: no file (`format: binary`).
pub(super) fn check_fields(schema: &Value) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, field) in properties.into_iter().flatten() {
        let item = field.get("items").unwrap_or(field);
        let binary = |s: &Value| {
            s.get("format").and_then(Value::as_str) == Some("binary")
                || s.get("contentMediaType").is_some()
                || s.get("contentEncoding").is_some()
        };
        if binary(field) || binary(item) {
            return Err(format!(
                "its request body has a file field `{name}`, which toolgate does not send \
                 (plain fields only)"
            ));
        }
    }
    Ok(())
}

/// `text`, cut to [`MAX_MESSAGE_CHARS`].
fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_path_value_cannot_climb_out_of_its_route() {
        let operation = super::super::operations::Operation {
            method: reqwest::Method::GET,
            path: "/repos/{owner}/issues".into(),
            base: url::Url::parse("https://api.example.com/v3/").unwrap(),
            params: vec![super::super::operations::Param {
                name: "owner".into(),
                place: Place::Path,
                style: Style::Simple,
                explode: false,
                json: false,
            }],
            body: None,
            auth: Vec::new(),
        };
        crate::base::install_crypto();
        let client = reqwest::Client::new();
        for owner in ["..", ".", "", "%2e%2e"] {
            let input = json!({ "owner": owner });
            let built = build(
                &client,
                &operation,
                input.as_object().unwrap(),
                vec![],
                None,
            );
            match built {
                Err(Failure::Input(message)) => assert!(message.contains("only dots"), "{message}"),
                Ok(request) => assert_eq!(
                    request.url().as_str(),
                    "https://api.example.com/v3/repos/%252e%252e/issues",
                    "{owner}"
                ),
                Err(_) => panic!("{owner}"),
            }
        }
        let input = json!({"owner": "a/../b"});
        let request = build(
            &client,
            &operation,
            input.as_object().unwrap(),
            vec![],
            None,
        );
        let Ok(request) = request else { panic!() };
        assert_eq!(
            request.url().as_str(),
            "https://api.example.com/v3/repos/a%2F..%2Fb/issues"
        );
    }

    #[test]
    fn values_are_written_in_their_styles() {
        assert_eq!(
            path_value("id", &json!("a/b c"), Style::Simple, false),
            "a%2Fb%20c"
        );
        assert_eq!(
            path_value("id", &json!([1, 2]), Style::Simple, false),
            "1,2"
        );
        assert_eq!(path_value("id", &json!([1, 2]), Style::Label, true), ".1.2");
        assert_eq!(
            path_value("id", &json!([1, 2]), Style::Matrix, true),
            ";id=1;id=2"
        );
        assert_eq!(
            path_value("o", &json!({"a": 1, "b": "x"}), Style::Simple, true),
            "a=1,b=x"
        );
        let param = |style, explode| super::super::operations::Param {
            name: "tags".into(),
            place: Place::Query,
            style,
            explode,
            json: false,
        };
        assert_eq!(
            query_pairs("tags", &json!(["a", "b"]), &param(Style::Form, true)),
            [("tags".into(), "a".into()), ("tags".into(), "b".into())]
        );
        assert_eq!(
            query_pairs("tags", &json!(["a", "b"]), &param(Style::Form, false)),
            [("tags".to_owned(), "a,b".to_owned())]
        );
        assert_eq!(
            query_pairs(
                "tags",
                &json!(["a", "b"]),
                &param(Style::PipeDelimited, false)
            ),
            [("tags".to_owned(), "a|b".to_owned())]
        );
        assert_eq!(
            query_pairs(
                "c",
                &json!({"R": 100, "G": 200}),
                &param(Style::PipeDelimited, false)
            ),
            [("c".to_owned(), "G|200|R|100".to_owned())]
        );
        assert_eq!(
            query_pairs(
                "f",
                &json!({"x": 1, "y": true}),
                &param(Style::DeepObject, true)
            ),
            [
                ("f[x]".to_owned(), "1".to_owned()),
                ("f[y]".to_owned(), "true".to_owned())
            ]
        );
    }
}
