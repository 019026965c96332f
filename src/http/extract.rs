//! Extractors that answer their rejections in the error envelope instead of axum's plain text.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body: a JSON object. Needs `Content-Type: application/json` (or
/// `application/<x>+json`); bounded by the body limit.
///
/// Every body the API takes is an object, and its document says so; but serde's derived
/// `Deserialize` of a struct also takes an array of its fields in order, so `[]` would be a
/// rejection with no reason, and `["why"]` one with a reason. A body that is not an object is
/// refused before it is parsed.
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::UnsupportedMediaType(
                "The request body must be JSON, sent with `Content-Type: application/json`.".into(),
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(
                    "The request body is larger than this server accepts.".into(),
                ),
                _ => ApiError::BadRequest(rejection.body_text()),
            }
        })?;
        if !is_object(&bytes) {
            return Err(ApiError::BadRequest(
                "The request body must be a JSON object.".into(),
            ));
        }
        // The plain parser first: axum's tracks the path to every value, which only a body that
        // does not parse needs, for its message.
        let mut parser = serde_json::Deserializer::from_slice(&bytes);
        if let Ok(value) =
            T::deserialize(&mut parser).and_then(|value| parser.end().map(|()| value))
        {
            return Ok(JsonBody(value));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(ApiError::BadRequest(rejection.body_text())),
        }
    }
}

/// Whether `body` starts as a JSON object does, after JSON's whitespace; one that is malformed
/// past its `{` is refused by the parser.
fn is_object(body: &[u8]) -> bool {
    body.iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|byte| *byte == b'{')
}

/// `application/json`, or a `+json` type such as `application/problem+json`, parameters aside:
/// what axum's `Json` accepts, checked without parsing a MIME type per request.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(essence) = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
    else {
        return false;
    };
    let Some((kind, subtype)) = essence.trim().split_once('/') else {
        return false;
    };
    let subtype = subtype.as_bytes();
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case(b"json")
            || (subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case(b"+json")))
}

/// One path segment, such as a tool name or a token.
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathParam(value))
            .map_err(|rejection: PathRejection| ApiError::BadRequest(rejection.body_text()))
    }
}

/// The tools the request's principal reaches (its `tools`), without a copy of the rest of the
/// principal: what a tool list needs, on the path of every `GET /tools`.
pub struct Reaching(pub crate::dispatch::who::Reach);

impl<S: Send + Sync> FromRequestParts<S> for Reaching {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<crate::dispatch::who::Principal>() {
            Some(principal) => Ok(Reaching(principal.tools.clone())),
            None => {
                tracing::error!("a route that passed no gate asked for its principal");
                Err(ApiError::Internal)
            }
        }
    }
}

/// Query parameters.
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection: QueryRejection| ApiError::BadRequest(rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_json(content_type: Option<&str>) -> bool {
        let mut headers = HeaderMap::new();
        if let Some(value) = content_type {
            headers.insert(CONTENT_TYPE, value.parse().unwrap());
        }
        json_content_type(&headers)
    }

    #[test]
    fn only_an_object_is_a_body() {
        for object in [&b"{}"[..], b" \r\n\t{\"reason\": \"x\"}", b"{"] {
            assert!(is_object(object), "{object:?}");
        }
        for other in [
            &b""[..],
            b"[]",
            b" [\"why\"]",
            b"\"x\"",
            b"null",
            b"5",
            b"\x0c{}",
        ] {
            assert!(!is_object(other), "{other:?}");
        }
    }

    #[test]
    fn json_content_types_are_those_axum_accepts() {
        for accepted in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            " application/json ;charset=utf-8",
            "application/problem+json",
            "application/vnd.api+JSON; ext=bulk",
        ] {
            assert!(is_json(Some(accepted)), "{accepted}");
        }
        for refused in [
            "text/json",
            "application/jsonx",
            "application/x-json-stream",
            "application/+json",
            "application",
            "json",
            "",
            "text/plain; type=application/json",
        ] {
            assert!(!is_json(Some(refused)), "{refused}");
        }
        assert!(!is_json(None));
    }
}
