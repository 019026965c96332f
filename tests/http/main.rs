//! The HTTP API, route by route, against a real server on 127.0.0.1:0: one binary, a module per
//! resource.

#[path = "../common/mod.rs"]
mod common;

mod approvals;
mod calls;
mod example_tools;
mod mounted;
mod service;
mod tools;

use common::{Backend, Location, TestServer};

/// The example tools, on a fresh location on `backend`.
async fn examples(backend: Backend) -> (TestServer, Location) {
    let location = Location::new(backend).await;
    (TestServer::examples(&location).await, location)
}
