//! Prism (`@stoplight/prism-cli`, installed by `.ci/test-deps`): a server that answers from an
//! OpenAPI document and refuses, with a problem document of its own, any request that breaks
//! it. The tests put a [`Recorder`] in front of it, so they count what reached the API and read
//! how Prism judged each request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::repo_root;
use super::upstream::free_port;

/// A document of `@readme/oas-examples` (`3.0/json/petstore.json`...).
pub fn example_document(path: &str) -> PathBuf {
    repo_root()
        .join(".ci/node/node_modules/@readme/oas-examples")
        .join(path)
}

/// GitHub's REST API document of `@octokit/openapi`.
pub fn github_document() -> PathBuf {
    repo_root().join(".ci/node/node_modules/@octokit/openapi/generated/api.github.com.json")
}

/// Prism mocking one document, on a port of its own.
pub struct Prism {
    child: Child,
    pub port: u16,
}

impl Prism {
    /// Starts Prism on `document` (`--errors`: every violation is an error answer) and waits
    /// until it answers.
    pub async fn start(document: &std::path::Path) -> Prism {
        Prism::start_with(document, &[]).await
    }

    /// [`Prism::start`] with more options (`--dynamic`: answers made from the schemas, not the
    /// document's examples).
    pub async fn start_with(document: &std::path::Path, options: &[&str]) -> Prism {
        super::tls();
        let port = free_port();
        let child = Command::new(repo_root().join(".ci/node/node_modules/.bin/prism"))
            .args([
                "mock",
                "--errors",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(options)
            .arg(document)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prism starts (bash .ci/test-deps installs it)");
        let prism = Prism { child, port };
        let client = reqwest::Client::new();
        super::eventually("prism answers", async || {
            client
                .get(format!("http://127.0.0.1:{port}/"))
                .send()
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        prism
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request that reached the recorder, and Prism's judgement of it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Prism's status.
    pub status: u16,
    /// Prism refused the request as breaking the document (its own problem document).
    pub refused: Option<String>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A proxy in front of Prism recording every request.
#[derive(Clone)]
pub struct Recorder {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

#[derive(Clone)]
struct Forward {
    to: String,
    client: reqwest::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    /// A recorder forwarding to `prism`.
    pub async fn start(prism: &Prism) -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let forward = Forward {
            to: format!("http://127.0.0.1:{}", prism.port),
            client: reqwest::Client::new(),
            seen: seen.clone(),
        };
        let app = axum::Router::new().fallback(relay).with_state(forward);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Recorder { addr, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests so far with `method` to a target beginning with `prefix`.
    pub fn to(&self, method: &str, prefix: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.method == method && seen.target.starts_with(prefix))
            .collect()
    }
}

async fn relay(State(forward): State<Forward>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap();
    let target = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_default();
    let mut headers = parts.headers.clone();
    headers.remove("host");
    let answer = forward
        .client
        .request(parts.method.clone(), format!("{}{target}", forward.to))
        .headers(headers)
        .body(body.clone())
        .send()
        .await
        .expect("prism answers");
    let status = answer.status();
    let content_type = answer.headers().get("content-type").cloned();
    let bytes = answer.bytes().await.unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let refused = text
        .contains("stoplight.io/prism/errors#")
        .then(|| text.into_owned());
    forward.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        target,
        headers: parts.headers,
        body,
        status: status.as_u16(),
        refused,
    });
    let mut response = (StatusCode::from_u16(status.as_u16()).unwrap(), bytes).into_response();
    if let Some(content_type) = content_type {
        response.headers_mut().insert("content-type", content_type);
    }
    response
}
