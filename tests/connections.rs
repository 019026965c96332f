//! Connections against a client that is slow on purpose, over real sockets to the real binary:
//! a head or a body that never ends is cut at its deadline, idle keep-alive sockets are closed,
//! trickled bodies hold no slot of `max_in_flight`, the listener survives running out of file
//! descriptors (whose soft limit the server raises to what `max_connections` needs), and past
//! `max_connections` a few reserved slots answer the health probes, however many silent
//! connections hold the others.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Binary, temp_dir};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough for anything the server should do at once, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(15);

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connects")
}

/// Everything the server sends until it closes the connection, or `None` if it is still open
/// after `within`.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut read = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(read),
            Ok(Ok(n)) => read.extend_from_slice(&buf[..n]),
        }
    }
}

/// One whole answer read off a keep-alive connection: its status and body (by Content-Length).
async fn answer(stream: &mut TcpStream) -> (u16, Value) {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = find(&read, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&read[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            if read.len() >= end + 4 + length {
                let status = head[9..12].parse().unwrap();
                let body =
                    serde_json::from_slice(&read[end + 4..end + 4 + length]).unwrap_or(Value::Null);
                return (status, body);
            }
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .expect("reads");
        assert!(n > 0, "closed before a whole answer: {read:?}");
        read.extend_from_slice(&buf[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
}

fn post_json(path: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_head_that_never_ends_is_cut_at_its_deadline() {
    let dir = temp_dir();
    let server = Binary::start(dir.path(), &[("TOOLGATE_SERVER__HEADER_TIMEOUT_MS", "600")]);
    let addr = server.api.addr();

    // Trickled a byte at a time, the head never ends; then a connection that sends nothing.
    let mut trickled = connect(addr).await;
    let trickle = async {
        let started = Instant::now();
        for byte in
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        {
            if trickled.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        started.elapsed()
    };
    let cut_after = trickle.await;
    assert!(
        until_closed(&mut trickled, PATIENCE).await.is_some(),
        "the trickled head's connection is closed"
    );
    // 70 bytes at 100 ms each would take 7 s: the server cut it well before.
    assert!(
        cut_after < Duration::from_secs(6),
        "cut after {cut_after:?}"
    );

    let mut silent = connect(addr).await;
    let closed = until_closed(&mut silent, PATIENCE).await;
    assert_eq!(
        closed,
        Some(Vec::new()),
        "a silent connection is closed, unanswered"
    );

    // The server itself serves on.
    let mut fresh = connect(addr).await;
    fresh.write_all(get("/healthz").as_bytes()).await.unwrap();
    assert_eq!(answer(&mut fresh).await.0, 200);
}

#[tokio::test]
async fn a_body_that_never_ends_is_answered_408_and_closed() {
    let dir = temp_dir();
    let server = Binary::start(dir.path(), &[("TOOLGATE_SERVER__BODY_TIMEOUT_MS", "600")]);
    let mut stream = connect(server.api.addr()).await;
    stream
        .write_all(
            b"POST /tools/echo/call HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":",
        )
        .await
        .unwrap();
    let (status, body) = answer(&mut stream).await;
    assert_eq!(status, 408);
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    assert!(
        until_closed(&mut stream, PATIENCE).await.is_some(),
        "the connection is closed after the 408"
    );
    // Nothing was called.
    let (status, calls) = server.api.get("/calls").await;
    assert_eq!(status, 200);
    assert_eq!(calls["calls"], json!([]), "{calls}");
}

#[tokio::test]
async fn trickled_sign_in_bodies_leave_every_door_answering() {
    let dir = temp_dir();
    let server = Binary::start(dir.path(), &[("TOOLGATE_MAX_IN_FLIGHT", "8")]);
    let addr = server.api.addr();

    // Twelve clients with no key start a sign-in whose body never arrives.
    let mut trickling = Vec::new();
    for _ in 0..12 {
        let mut stream = connect(addr).await;
        stream
            .write_all(
                b"POST /inbox/sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                  Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nkey=",
            )
            .await
            .unwrap();
        trickling.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (status, body) = server.api.get("/tools").await;
    assert_eq!(status, 200, "REST lists its tools: {body}");
    let (status, body) = server
        .api
        .call("echo", json!({ "text": "still here" }))
        .await;
    assert_eq!(status, 200, "REST calls a tool: {body}");
    let mcp = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 200, "MCP lists its tools");
    let inbox = reqwest::get(format!("http://{addr}/inbox")).await.unwrap();
    assert_eq!(inbox.status(), 200, "the inbox shows its queue");

    // The trickled requests are still open (their body timeout is 30 s).
    for stream in &mut trickling {
        assert_eq!(until_closed(stream, Duration::from_millis(50)).await, None);
    }
}

#[tokio::test]
async fn idle_connections_are_closed_and_held_requests_are_not_idle() {
    let dir = temp_dir();
    let server = Binary::start(dir.path(), &[("TOOLGATE_SERVER__IDLE_TIMEOUT_MS", "800")]);
    let addr = server.api.addr();

    // A keep-alive connection answered once, then left alone, is closed.
    let mut idle = connect(addr).await;
    idle.write_all(get("/healthz").as_bytes()).await.unwrap();
    assert_eq!(answer(&mut idle).await.0, 200);
    assert_eq!(
        until_closed(&mut idle, PATIENCE).await,
        Some(Vec::new()),
        "an idle keep-alive connection is closed"
    );

    // A request held longer than the idle timeout is answered, on its connection.
    let (status, made) = server
        .api
        .call("ask_human", json!({ "question": "Ship it?" }))
        .await;
    assert_eq!(status, 202, "{made}");
    let call_id = made["call_id"].as_str().unwrap();
    let mut held = connect(addr).await;
    held.write_all(get(&format!("/calls/{call_id}?wait=2")).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let (status, call) = answer(&mut held).await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "suspended");
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "held for its whole wait, past the idle timeout: {:?}",
        started.elapsed()
    );
    // And the connection is still usable after it.
    held.write_all(get("/healthz").as_bytes()).await.unwrap();
    assert_eq!(answer(&mut held).await.0, 200);
}

#[tokio::test]
async fn running_out_of_file_descriptors_does_not_stop_the_listener() {
    let dir = temp_dir();
    let server = Binary::start_with_file_limit(dir.path(), 64, &[]);
    let addr = server.api.addr();

    // A connection opened first keeps being served throughout.
    let mut kept = connect(addr).await;
    kept.write_all(get("/healthz").as_bytes()).await.unwrap();
    assert_eq!(answer(&mut kept).await.0, 200);

    // More connections than the process may have files: the kernel queues them, the server
    // cannot accept them all.
    let mut flood = Vec::new();
    for _ in 0..120 {
        flood.push(connect(addr).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kept.write_all(get("/healthz").as_bytes()).await.unwrap();
    assert_eq!(
        answer(&mut kept).await.0,
        200,
        "an open connection is answered while accepts fail"
    );
    let refusals = server
        .log()
        .iter()
        .filter(|line| line.contains("cannot accept a connection"))
        .count();
    assert!(refusals >= 1, "the failing accepts are logged");
    // A hard limit below what max_connections needs is said at start.
    assert!(
        server
            .log()
            .iter()
            .any(|line| line.contains("below what max_connections needs")),
        "the start says the hard limit is too low"
    );
    assert!(
        refusals <= 4,
        "at most once a second, not once per attempt: {refusals} lines"
    );

    drop(flood);
    // Once the flood is gone, new connections are served again.
    let served = common::eventually("a new connection is served", async || {
        let mut fresh = connect(addr).await;
        fresh.write_all(get("/healthz").as_bytes()).await.ok()?;
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), fresh.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        buf[..n].starts_with(b"HTTP/1.1 200").then_some(())
    })
    .await;
    let () = served;
}

#[tokio::test]
async fn past_max_connections_only_the_probes_are_answered_and_others_told_to_retry() {
    let dir = temp_dir();
    let server = Binary::start(dir.path(), &[("TOOLGATE_SERVER__MAX_CONNECTIONS", "3")]);
    let addr = server.api.addr();

    let mut open = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(addr).await;
        stream.write_all(get("/healthz").as_bytes()).await.unwrap();
        assert_eq!(answer(&mut stream).await.0, 200);
        open.push(stream);
    }
    // Past the three, a connection gets a reserved slot: a call is told to come back, and the
    // connection closed; a probe is answered.
    let mut refused = connect(addr).await;
    let echo = post_json("/tools/echo/call", &json!({"input": {"text": "later"}}));
    refused.write_all(echo.as_bytes()).await.unwrap();
    let said = until_closed(&mut refused, PATIENCE)
        .await
        .expect("closed after its answer");
    let said = String::from_utf8_lossy(&said).to_ascii_lowercase();
    assert!(said.starts_with("http/1.1 503"), "{said}");
    assert!(said.contains("retry-after: 1"), "{said}");
    assert!(said.contains("\"overloaded\""), "{said}");
    let mut probe = connect(addr).await;
    probe.write_all(get("/readyz").as_bytes()).await.unwrap();
    assert_eq!(answer(&mut probe).await.0, 200);
    drop(probe);
    // One of the three closes: a call is served again, on its slot.
    drop(open.pop());
    let served = common::eventually("a call is served once a slot is free", async || {
        let mut stream = connect(addr).await;
        stream.write_all(echo.as_bytes()).await.ok()?;
        let (status, body) = answer(&mut stream).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(served["output"]["text"], "later");
}

#[tokio::test]
async fn silent_connections_holding_every_slot_leave_the_probes_answered() {
    let dir = temp_dir();
    // Forty slots, and a head may take a minute: silent sockets hold them all that long.
    let server = Binary::start(
        dir.path(),
        &[
            ("TOOLGATE_SERVER__MAX_CONNECTIONS", "40"),
            ("TOOLGATE_SERVER__HEADER_TIMEOUT_MS", "60000"),
        ],
    );
    let addr = server.api.addr();
    let mut silent = Vec::new();
    for _ in 0..60 {
        silent.push(connect(addr).await);
    }
    // The probe waits behind the silent ones the reserve takes in turn (each closed after a
    // second without a head), then is answered; not after the minute the forty hold theirs.
    let mut probe = connect(addr).await;
    probe.write_all(get("/healthz").as_bytes()).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(40), answer(&mut probe)).await;
    assert_eq!(answered.expect("answered while the forty are held").0, 200);
    drop(silent);
}

#[tokio::test]
async fn the_soft_open_file_limit_is_raised_for_max_connections() {
    let dir = temp_dir();
    // A soft limit of 64 under a higher hard one: raised, so 120 connections are all served.
    let server = Binary::start_with_soft_file_limit(dir.path(), 64, &[]);
    let addr = server.api.addr();
    let mut many = Vec::new();
    for _ in 0..120 {
        let mut stream = connect(addr).await;
        stream.write_all(get("/healthz").as_bytes()).await.unwrap();
        assert_eq!(answer(&mut stream).await.0, 200);
        many.push(stream);
    }
    let log = server.log();
    assert!(
        log.iter()
            .any(|line| line.contains("raised the open-file limit")),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|line| line.contains("cannot accept")),
        "{log:?}"
    );
}
