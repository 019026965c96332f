//! Extractors that answer their rejections in the error envelope instead of axum's plain text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;

/// Refuses JSON nested deeper than `max` levels: bounded work for the validators and the
/// store, whatever a client sends.
pub fn check_depth(value: &Value, max: usize) -> Result<(), ApiError> {
    fn depth(value: &Value) -> usize {
        match value {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    // serde_json already refuses more than 128 levels while parsing, so this recursion is
    // bounded too.
    if depth(value) > max {
        return Err(ApiError::BadRequest(format!(
            "The JSON is nested deeper than {max} levels."
        )));
    }
    Ok(())
}

/// A JSON request body. Needs `Content-Type: application/json`; bounded by the body limit.
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection.status() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType(
            "The request body must be JSON, sent with `Content-Type: application/json`.".into(),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::PayloadTooLarge("The request body is larger than this server accepts.".into())
        }
        _ => ApiError::BadRequest(rejection.body_text()),
    }
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
