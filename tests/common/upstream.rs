//! The upstream MCP server of the tests (`tests/upstream/server.py`, on the official Python SDK)
//! over Streamable HTTP, run by the test rather than by toolgate.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Api, ci_python, eventually, mcp_request_as, repo_root};

pub fn server_script() -> PathBuf {
    repo_root().join("tests/upstream/server.py")
}

/// `GET /tools`' names.
pub async fn tool_names(api: &Api) -> Vec<String> {
    let (status, body) = api.get("/tools").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `GET /tools/{name}`.
pub async fn descriptor(api: &Api, name: &str) -> Value {
    let (status, body) = api.get(&format!("/tools/{name}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// `tools/list` over `/mcp`, in the `initialize` era.
pub async fn mcp_tools(api: &Api) -> Vec<Value> {
    let (status, _, body) = mcp_request_as(api, None, "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["result"]["tools"].as_array().unwrap().clone()
}

/// How many times the upstream ran `tool`, by its log in `dir`.
pub fn runs(dir: &Path, tool: &str) -> usize {
    match std::fs::read_to_string(dir.join("runs.log")) {
        Ok(text) => text.lines().filter(|line| *line == tool).count(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
        Err(err) => panic!("cannot read runs.log: {err}"),
    }
}

/// The lines of the upstream's start log for `transport`.
pub fn starts(dir: &Path, transport: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("starts-{transport}.log")))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The upstream server over Streamable HTTP, run by the test (not by toolgate).
pub struct HttpUpstream {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl HttpUpstream {
    pub async fn start(dir: &Path, port: u16) -> HttpUpstream {
        let before = starts(dir, "http");
        let child = Command::new(ci_python())
            .arg(server_script())
            .args(["--transport", "http", "--port", &port.to_string(), "--dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the upstream server starts");
        // The port is bound before the start line is written.
        eventually("the HTTP upstream is listening", async || {
            (starts(dir, "http") > before).then_some(())
        })
        .await;
        HttpUpstream {
            child,
            port,
            dir: dir.to_owned(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub async fn restart(&mut self) {
        self.kill();
        *self = HttpUpstream::start(&self.dir, self.port).await;
    }
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        self.kill();
    }
}
