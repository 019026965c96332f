//! The SMTP server of `tests/notify/smtp_sink.py` (aiosmtpd), writing each message it accepts
//! as a JSON file, for the tests that read mail (notifications, decision links).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The SMTP server of `smtp_sink.py`, writing each message it accepts as a JSON file. It binds
/// its own port, so no other test can take the port between a choice and a bind.
pub struct Sink {
    child: Child,
    lines: std::io::BufReader<std::process::ChildStdout>,
    dir: PathBuf,
    /// The port it holds: refusing connections until [`Sink::open`], then listening.
    pub port: u16,
}

impl Sink {
    /// Listens on a port of its own, writing to `dir`; answers the first `defer` messages 451.
    pub fn start(dir: &Path, defer: u32) -> Sink {
        let sink = Sink::down(dir, defer);
        sink.open()
    }

    /// Holds a port of its own but refuses connections there, as a server that is down, until
    /// [`Sink::open`].
    pub fn down(dir: &Path, defer: u32) -> Sink {
        std::fs::create_dir_all(dir).unwrap();
        let script = super::repo_root().join("tests/notify/smtp_sink.py");
        let mut child = Command::new(super::ci_python())
            .arg(script)
            .arg(dir)
            .arg(defer.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the SMTP sink starts");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
        let line = read_line(&mut lines);
        let port = line
            .strip_prefix("port ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the SMTP sink names its port: {line:?}"));
        Sink {
            child,
            lines,
            dir: dir.to_owned(),
            port,
        }
    }

    /// Starts listening on the port held.
    pub fn open(mut self) -> Sink {
        let stdin = self.child.stdin.as_mut().unwrap();
        std::io::Write::write_all(stdin, b"open\n").unwrap();
        std::io::Write::flush(stdin).unwrap();
        assert_eq!(read_line(&mut self.lines), "ready", "the SMTP sink listens");
        self
    }

    /// Every message accepted so far, oldest first.
    pub fn messages(&self) -> Vec<Value> {
        messages_in(&self.dir)
    }

    /// Waits until `count` messages are accepted; then a while longer, and checks no more came.
    pub async fn exactly(&self, count: usize) -> Vec<Value> {
        super::eventually(&format!("{count} mails"), async || {
            let got = self.messages();
            (got.len() >= count).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let got = self.messages();
        assert_eq!(got.len(), count, "no more mail than that: {got:#?}");
        got
    }
}

fn read_line(lines: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    line.trim().to_owned()
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The messages written in `dir`, oldest first.
pub fn messages_in(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<PathBuf> = entries
        .map_while(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}
