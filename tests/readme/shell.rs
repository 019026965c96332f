//! The terminals a reader pastes into: one shell that every block goes to in order (so what a
//! block leaves behind, a variable or a job, is there for the next), and a terminal of its own
//! for each server the README runs in the foreground.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DONE: &str = "@@README-BLOCK-DONE@@";

/// A `bash` as a new terminal has it: in `dir`, with none of the variables cargo sets for a test
/// (a `CARGO_TARGET_DIR` would move `target/release/toolgate`) nor any `TOOLGATE_*` one, and in a
/// process group of its own, so that whatever it started goes when it does.
fn bash(dir: &Path) -> Command {
    let mut command = Command::new("bash");
    command
        .args(["--noprofile", "--norc"])
        .current_dir(dir)
        .process_group(0);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if (name.starts_with("CARGO_") && name != "CARGO_HOME")
            || name.starts_with("TOOLGATE_")
            || name == "RUST_LOG"
        {
            command.env_remove(name);
        }
    }
    command
}

/// Ends a process group: SIGTERM (the servers stop as they would at a Ctrl-C), then SIGKILL.
fn end_group(child: &mut Child) {
    let group = format!("-{}", child.id());
    // A group already gone makes `kill` complain; that is no news, so its stderr is dropped.
    let _ = Command::new("kill")
        .args(["-TERM", "--", &group])
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &group])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
}

fn collect(mut from: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let into = text.clone();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while let Ok(n) = from.read(&mut buffer) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    });
    text
}

/// The one shell, under `set -e`: a command that fails ends it, and the block it was in fails.
pub struct Shell {
    child: Child,
    stdin: ChildStdin,
    stdout: Receiver<Vec<u8>>,
    stderr: Arc<Mutex<String>>,
}

pub struct Pasted {
    pub stdout: String,
    pub stderr: String,
}

impl Shell {
    pub fn open(dir: &Path) -> Shell {
        let mut child = bash(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash starts");
        let stdin = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let (send, stdout) = channel();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            while let Ok(n) = out.read(&mut buffer) {
                if n == 0 || send.send(buffer[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let stderr = collect(child.stderr.take().unwrap());
        let mut shell = Shell {
            child,
            stdin,
            stdout,
            stderr,
        };
        shell.write("set -e\n");
        shell
    }

    fn write(&mut self, text: &str) {
        self.stdin
            .write_all(text.as_bytes())
            .expect("the shell reads its input");
        self.stdin.flush().unwrap();
    }

    /// Pastes `text` and waits for it to finish, for at most `limit`.
    pub fn paste(&mut self, text: &str, limit: Duration) -> Result<Pasted, String> {
        let errors_before = self.stderr.lock().unwrap().len();
        self.write(text);
        self.write(&format!("\nprintf '\\n{DONE}\\n'\n"));
        let deadline = Instant::now() + limit;
        let mut stdout = Vec::new();
        let end = loop {
            if let Some(at) = find(&stdout, DONE.as_bytes()) {
                break at;
            }
            // The jobs a block started keep the shell's stdout open after it ends, so the end
            // of the shell is looked for, not only the end of its output.
            if let Ok(Some(status)) = self.child.try_wait() {
                let what = format!("the shell ended ({status}): a command failed");
                return Err(self.failure(&stdout, errors_before, &what));
            }
            if Instant::now() > deadline {
                let what = format!("still running after {limit:?}");
                return Err(self.failure(&stdout, errors_before, &what));
            }
            match self.stdout.recv_timeout(Duration::from_millis(200)) {
                Ok(bytes) => stdout.extend(bytes),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(200))
                }
            }
        };
        let stderr = self.stderr.lock().unwrap()[errors_before..].to_owned();
        Ok(Pasted {
            stdout: String::from_utf8_lossy(&stdout[..end])
                .trim_end()
                .to_owned(),
            stderr,
        })
    }

    fn failure(&self, stdout: &[u8], errors_before: usize, what: &str) -> String {
        // The shell's output is read on its own thread; give its last words a moment to arrive.
        std::thread::sleep(Duration::from_millis(200));
        let stderr = &self.stderr.lock().unwrap()[errors_before..];
        format!(
            "{what}\n--- stdout:\n{}\n--- stderr:\n{stderr}",
            String::from_utf8_lossy(stdout)
        )
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        end_group(&mut self.child);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A server the README runs in a terminal of its own, its output kept in a log file.
pub struct Terminal {
    child: Child,
    pub log: PathBuf,
}

impl Terminal {
    pub fn start(dir: &Path, text: &str, log: PathBuf) -> Terminal {
        let file = std::fs::File::create(&log).unwrap();
        let child = bash(dir)
            .args(["-e", "-c", text])
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("bash starts");
        Terminal { child, log }
    }

    /// Waits until `url` answers 200, for at most `limit`; an error if the terminal's command
    /// ended first, or the time ran out, with what it printed.
    pub fn wait_ready(&mut self, url: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if status_of(url) == Some(200) {
                return Ok(());
            }
            let log = || std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "it ended ({status}) before {url} answered:\n{}",
                    log()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("{url} did not answer within {limit:?}:\n{}", log()));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        end_group(&mut self.child);
    }
}

/// The status of a plain GET of a loopback `http://127.0.0.1:PORT/path` URL, or `None` when
/// nothing answers (a std socket: the check needs no runtime).
fn status_of(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/')?;
    let mut socket = std::net::TcpStream::connect(authority).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        socket,
        "GET /{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    socket.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
