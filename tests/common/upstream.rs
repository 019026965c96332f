//! The upstream MCP server of the tests (`tests/upstream/server.py`, on the official Python SDK)
//! over Streamable HTTP, run by the test rather than by toolgate.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{ci_python, eventually, repo_root};

pub fn server_script() -> PathBuf {
    repo_root().join("tests/upstream/server.py")
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
