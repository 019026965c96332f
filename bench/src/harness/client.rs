//! The harness's HTTP/1 client: keep-alive connections, one request and its whole answer, and
//! the few calls every scenario makes (a GET, a `send_email`, an `ask_human` and many of them,
//! a figure from `/metrics`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// A keep-alive connection's sending half.
pub type Sender = SendRequest<Full<Bytes>>;

pub(crate) const ECHO_BODY: &str = r#"{"input":{"text":"hello, tools"}}"#;
pub(crate) const EMAIL_BODY: &str =
    r#"{"input":{"to":"bench@example.com","subject":"load","body":"one of many"}}"#;
pub(crate) const ASK_BODY: &str = r#"{"input":{"question":"ship it?"}}"#;
pub(crate) const ANSWER_BODY: &str = r#"{"input":{"answer":"yes"}}"#;
pub(crate) const PEER_BODY: &str = r#"{"text":"hello, tools"}"#;
pub(crate) const MCP_ECHO_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello, tools"}}}"#;
pub(crate) const GATED_MCP_ECHO_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"peer__echo","arguments":{"text":"hello, tools"}}}"#;
pub(crate) const GATED_ECHO_BODY: &str = r#"{"input":{"text":"hello, tools"}}"#;
/// The bare server's echo called through toolgate's OpenAPI upstream: the same request body,
/// under the tool's `body`.
pub(crate) const API_ECHO_BODY: &str = r#"{"input":{"body":{"input":{"text":"hello, tools"}}}}"#;

/// A keep-alive HTTP/1 connection to `addr`.
pub(crate) async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// One request of `method` to `path` on `sender`, with a JSON `body` unless it is empty and an
/// `Idempotency-Key` when `key` is given; the answer's status and whole body.
pub(crate) async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    method: Method,
    path: &str,
    key: Option<&str>,
    body: &'static str,
) -> Result<(StatusCode, Bytes), String> {
    send_with(sender, method, path, key, &[], body).await
}

pub(crate) async fn send_with(
    sender: &mut SendRequest<Full<Bytes>>,
    method: Method,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &'static str,
) -> Result<(StatusCode, Bytes), String> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .map_err(|e| e.to_string())?;
    exchange(sender, request).await
}

/// Sends `request` on `sender` once it is ready; the answer's status and whole body.
pub(crate) async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// GETs `path` once and returns the body.
pub async fn fetch(addr: SocketAddr, path: &str) -> Result<Bytes, String> {
    let mut sender = connect(addr).await?;
    match send(&mut sender, Method::GET, path, None, "").await? {
        (StatusCode::OK, body) => Ok(body),
        (status, body) => Err(format!(
            "GET {path}: {status} {}",
            String::from_utf8_lossy(&body)
        )),
    }
}

/// One `send_email` call with `key` as its `Idempotency-Key`, on a connection of its own.
pub async fn send_email(addr: SocketAddr, key: &str) -> Result<(StatusCode, Bytes), String> {
    let mut sender = connect(addr).await?;
    send(
        &mut sender,
        Method::POST,
        "/tools/send_email/call",
        Some(key),
        EMAIL_BODY,
    )
    .await
}

/// Whether `needle` occurs in `body`.
pub(crate) fn contains(body: &[u8], needle: &str) -> bool {
    body.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The suspension token in a `202` body.
pub(crate) fn token(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("\"token\":\"")? + 9;
    let end = start + text[start..].find('"')?;
    Some(text[start..end].to_owned())
}

/// One `ask_human` call, which suspends: the answer's status and body.
pub(crate) async fn ask_human(
    sender: &mut SendRequest<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), String> {
    send(
        sender,
        Method::POST,
        "/tools/ask_human/call",
        None,
        ASK_BODY,
    )
    .await
}

/// The `status` of a call's record (or of a call's answer).
pub(crate) fn status_of(body: &[u8]) -> Option<String> {
    let call: serde_json::Value = serde_json::from_slice(body).ok()?;
    call["status"].as_str().map(str::to_owned)
}

/// A sample that failed, and why; the scenario goes on.
pub(crate) fn failed(name: &str, why: &str) {
    eprintln!("{name}: a sample failed: {why}");
}

/// A fresh suspended call on `sender`: its id and its suspension's token.
pub(crate) async fn suspend(sender: &mut Sender) -> Result<(String, String), String> {
    let (status, body) = ask_human(sender).await?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
    match (
        status,
        answer["call_id"].as_str(),
        answer["suspension"]["token"].as_str(),
    ) {
        (StatusCode::ACCEPTED, Some(id), Some(token)) => Ok((id.to_owned(), token.to_owned())),
        _ => Err(format!(
            "ask_human answered {status} {}",
            String::from_utf8_lossy(&body)
        )),
    }
}

/// The value of the unlabelled series `name` in the `/metrics` of the server on `sender`.
pub(crate) async fn metric(sender: &mut Sender, name: &str) -> Result<f64, String> {
    let (status, body) = send(sender, Method::GET, "/metrics", None, "").await?;
    if status != StatusCode::OK {
        return Err(format!("GET /metrics answered {status}"));
    }
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("no {name} in /metrics"))
}

/// `count` suspended calls on `addr`, made on `connections` connections at once: each call's id
/// and when its `202` had arrived (after its commit), in no order, and the calls that failed.
pub(crate) async fn suspend_many(
    addr: SocketAddr,
    count: usize,
    connections: usize,
) -> Result<(Vec<(String, Instant)>, u64), String> {
    let next = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections.clamp(1, count.max(1)) {
        let (next, failures) = (next.clone(), failures.clone());
        let mut sender = connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut made = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < count as u64 {
                match suspend(&mut sender).await {
                    Ok((call_id, _)) => made.push((call_id, Instant::now())),
                    Err(why) => {
                        failed("suspending", &why);
                        failures.fetch_add(1, Ordering::Relaxed);
                        match connect(addr).await {
                            Ok(fresh) => sender = fresh,
                            Err(_) => break,
                        }
                    }
                }
            }
            made
        }));
    }
    let mut made = Vec::with_capacity(count);
    for task in tasks {
        made.extend(task.await.map_err(|e| e.to_string())?);
    }
    let missing = (count - made.len()) as u64;
    Ok((made, failures.load(Ordering::Relaxed).max(missing)))
}
