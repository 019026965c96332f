//! The peer: the same echo tool, in Python, as FastMCP behind mcpo (the MCP-to-OpenAPI proxy),
//! and as FastMCP's own Streamable HTTP server (stateless, JSON answers: what `/mcp` is), installed
//! from PyPI into two virtualenvs of its own (mcpo 0.0.20 needs `mcp<2` and `fastapi<0.123`;
//! FastMCP 4 needs `mcp>=2.3`, so they cannot share one).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::client::fetch;
use super::operation::mcp_echo_once;
use super::servers::peak_rss_kib;

const ECHO_SERVER: &str = r#"import sys

from fastmcp import FastMCP

mcp = FastMCP("echo")


@mcp.tool
def echo(text: str) -> dict:
    """Returns the text it is given, unchanged."""
    return {"text": text}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        # Streamable HTTP on this port, stateless with JSON answers; else stdio (for mcpo).
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), stateless_http=True,
                json_response=True, show_banner=False, log_level="warning")
    else:
        mcp.run()
"#;

/// mcpo serving the FastMCP echo server on 127.0.0.1, or that server over Streamable HTTP.
pub struct Peer {
    child: Child,
    /// Where mcpo listens.
    pub addr: SocketAddr,
}

fn venv(dir: &Path, packages: &[&str]) -> Result<PathBuf, String> {
    let python = dir.join("bin/python");
    let marker = dir.join(".installed");
    let wanted = packages.join(" ");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    let run = |command: &mut Command| -> Result<(), String> {
        let output = command.output().map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("failed")
                .to_owned())
        }
    };
    eprintln!("installing {wanted} into {}", dir.display());
    run(Command::new("python3").args(["-m", "venv"]).arg(dir))
        .map_err(|e| format!("python3 -m venv: {e}"))?;
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages))
    .map_err(|e| format!("pip install {wanted}: {e}"))?;
    std::fs::write(&marker, &wanted).map_err(|e| e.to_string())?;
    Ok(python)
}

/// The peer's directory, FastMCP's python and the echo server's script, installed once.
fn install(root: &Path) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let dir = root.join("peer");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let fastmcp = venv(&dir.join("fastmcp"), &["fastmcp>=4,<5", "mcp>=2.3"])?;
    let script = dir.join("echo_server.py");
    std::fs::write(&script, ECHO_SERVER).map_err(|e| e.to_string())?;
    Ok((dir, fastmcp, script))
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| e.to_string())
}

impl Peer {
    /// Installs (once) and starts mcpo over the FastMCP echo server; an error says why it
    /// cannot run here.
    pub async fn start(root: &Path) -> Result<Peer, String> {
        let (dir, fastmcp, script) = install(root)?;
        let mcpo = venv(
            &dir.join("mcpo"),
            &["mcpo==0.0.20", "mcp<2", "fastapi<0.123"],
        )?;
        let port = free_port()?;
        let child = Command::new(mcpo.parent().unwrap().join("mcpo"))
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--"])
            .arg(&fastmcp)
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start mcpo: {e}"))?;
        Peer::answering(child, port, "mcpo", async |addr| {
            fetch(addr, "/openapi.json").await.is_ok()
        })
        .await
    }

    /// Installs (once) and starts the FastMCP echo server on its own Streamable HTTP transport.
    pub async fn start_mcp(root: &Path) -> Result<Peer, String> {
        let (_, fastmcp, script) = install(root)?;
        let port = free_port()?;
        let child = Command::new(&fastmcp)
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start FastMCP: {e}"))?;
        Peer::answering(child, port, "FastMCP", async |addr| {
            mcp_echo_once(addr).await.is_ok()
        })
        .await
    }

    /// `child`, once `ready` says it answers on `port` (within 60 s).
    async fn answering(
        child: Child,
        port: u16,
        what: &str,
        ready: impl AsyncFn(SocketAddr) -> bool,
    ) -> Result<Peer, String> {
        let peer = Peer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if ready(peer.addr).await {
                return Ok(peer);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!("{what} did not answer within 60 s"))
    }

    /// The peer's process id (mcpo's, or FastMCP's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The peak resident memory of the peer and its children (mcpo's FastMCP) together, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.pid()))
            .unwrap_or_default();
        let child_peak: u64 = children
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .filter_map(peak_rss_kib)
            .sum();
        peak_rss_kib(self.pid()).map(|own| own + child_peak)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
