//! The SQLite process's disk, filled: its data directory on a size-limited file system (a
//! tmpfs the run mounts, where the machine lets it: as root), which a fault shrinks to what it
//! holds, so that every write that needs a new page fails (`ENOSPC`, SQLite's `SQLITE_FULL`),
//! then grows back. The outbox, the checker's ledger, stays on the machine's own disk (a link
//! from the data directory), so that a full disk fails the server's writes, not the ledger's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The room the file system has when it is not full: far more than a run writes.
const ROOM: &str = "size=4g";

/// A tmpfs mounted on a data directory, unmounted when dropped.
pub struct Disk {
    dir: PathBuf,
    /// Where the outbox really is.
    _outbox: tempfile::TempDir,
}

impl Disk {
    /// Mounts a tmpfs on `dir` (empty), with its outbox elsewhere; `None` (and why, printed)
    /// where the machine does not let the run mount one.
    pub fn mount(dir: &Path) -> Option<Disk> {
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", ROOM, "tmpfs"])
            .arg(dir)
            .output();
        match mounted {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                eprintln!(
                    "no full disk in this run: cannot mount a tmpfs ({})",
                    why.trim()
                );
                return None;
            }
            Err(err) => {
                eprintln!("no full disk in this run: cannot run mount ({err})");
                return None;
            }
        }
        let outbox = tempfile::tempdir().unwrap();
        let real = outbox.path().join("outbox.jsonl");
        std::fs::write(&real, "").unwrap();
        std::os::unix::fs::symlink(&real, dir.join("outbox.jsonl")).unwrap();
        Some(Disk {
            dir: dir.to_owned(),
            _outbox: outbox,
        })
    }

    /// Fills the disk: its size becomes what it holds now. The server writes meanwhile, and a
    /// size below what the file system holds is refused, so that is measured again and retried.
    pub fn fill(&self) {
        for _ in 0..50 {
            let used = Command::new("df")
                .args(["-B1", "--output=used"])
                .arg(&self.dir)
                .output()
                .unwrap();
            let used = String::from_utf8_lossy(&used.stdout);
            let bytes: u64 = used.lines().last().unwrap().trim().parse().unwrap();
            // tmpfs counts whole pages; a size of at least one page.
            if self.try_remount(&format!("size={}", bytes.max(4096))) {
                return;
            }
        }
        panic!("the disk never held still long enough to be filled");
    }

    /// Gives the disk its room back.
    pub fn free(&self) {
        self.remount(ROOM);
    }

    fn remount(&self, size: &str) {
        assert!(self.try_remount(size), "remount {size}");
    }

    fn try_remount(&self, size: &str) -> bool {
        Command::new("mount")
            .args(["-o", &format!("remount,{size}")])
            .arg(&self.dir)
            .output()
            .unwrap()
            .status
            .success()
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        // Lazily: a process that still holds a file there must not keep the mount behind.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
