//! Every HTTP request's `SERVER` span, when traces are exported: named by its method and route
//! template (`POST /tools/{name}/call`, never a path with a token in it), a child of the
//! caller's context from `traceparent`, its status recorded once answered.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

use crate::telemetry::spans;

/// The middleware; `app.rs` layers it over every route only when traces are exported.
pub async fn traced(request: Request, next: Next) -> Response {
    let span = {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or("unmatched", MatchedPath::as_str);
        spans::server(request.method().as_str(), route, request.headers())
    };
    let response = next.run(request).instrument(span.clone()).await;
    spans::answered(&span, response.status().as_u16());
    response
}
