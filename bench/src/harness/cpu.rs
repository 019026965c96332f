//! CPU time by process, from `/proc`: the servers under load, PostgreSQL (the postmaster and
//! every process it started, those that exited meanwhile included), the harness itself (the
//! load generator), and the machine as a whole. Linux only; elsewhere every figure is absent.

/// `/proc` reports CPU time in ticks of `USER_HZ`, which is 100 on every Linux architecture
/// the harness runs on.
const TICK_S: f64 = 0.01;

/// CPU seconds used so far, by whom.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    /// The servers of the scenario (every replica).
    pub servers_s: f64,
    /// The PostgreSQL server, every process of it, when it runs on this machine: what the
    /// scenario made it do, and whatever else it did meanwhile (for other databases too).
    pub postgres_s: Option<f64>,
    /// The backends of the scenario's own database (toolgate's connections, or the commits
    /// baseline's clients'), when the server runs on this machine.
    pub backends_s: Option<f64>,
    /// The harness: the load generator (and its sampling, which is little).
    pub harness_s: f64,
    /// Every core of the machine, busy (anything but idle and iowait).
    pub machine_busy_s: f64,
    /// Every core of the machine, busy or not.
    pub machine_total_s: f64,
}

impl Cpu {
    /// CPU used now by `servers`, by the PostgreSQL whose postmaster is `postmaster`, by this
    /// process, and by the machine.
    pub fn now(servers: &[u32], postmaster: Option<u32>) -> Cpu {
        let (machine_busy_s, machine_total_s) = machine().unwrap_or_default();
        Cpu {
            servers_s: servers
                .iter()
                .filter_map(|&pid| stat(pid).map(|s| s.own_s()))
                .sum(),
            postgres_s: postmaster.and_then(tree_s),
            backends_s: None,
            harness_s: stat(std::process::id()).map_or(0.0, |s| s.own_s()),
            machine_busy_s,
            machine_total_s,
        }
    }

    /// `self - before`.
    pub fn since(self, before: Cpu) -> Cpu {
        Cpu {
            servers_s: self.servers_s - before.servers_s,
            postgres_s: self.postgres_s.zip(before.postgres_s).map(|(a, b)| a - b),
            backends_s: self.backends_s,
            harness_s: self.harness_s - before.harness_s,
            machine_busy_s: self.machine_busy_s - before.machine_busy_s,
            machine_total_s: self.machine_total_s - before.machine_total_s,
        }
    }

    /// `self + other`.
    pub fn plus(self, other: Cpu) -> Cpu {
        Cpu {
            servers_s: self.servers_s + other.servers_s,
            postgres_s: self.postgres_s.zip(other.postgres_s).map(|(a, b)| a + b),
            backends_s: self.backends_s.zip(other.backends_s).map(|(a, b)| a + b),
            harness_s: self.harness_s + other.harness_s,
            machine_busy_s: self.machine_busy_s + other.machine_busy_s,
            machine_total_s: self.machine_total_s + other.machine_total_s,
        }
    }
}

/// The fields of `/proc/<pid>/stat` the harness uses.
struct Stat {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

impl Stat {
    fn own_s(&self) -> f64 {
        (self.utime + self.stime) as f64 * TICK_S
    }
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: the fields start after its end.
    let fields: Vec<&str> = text[text.rfind(')')? + 2..].split(' ').collect();
    // Counted from the state, the third field of the file: ppid is the 4th, utime the 14th.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        ppid: u32::try_from(field(4)?).ok()?,
        utime: field(14)?,
        stime: field(15)?,
        cutime: field(16)?,
        cstime: field(17)?,
    })
}

/// The CPU process `pid` has used so far (every thread), in seconds.
pub fn process_s(pid: u32) -> Option<f64> {
    stat(pid).map(|s| s.own_s())
}

/// The CPU a set of processes used between two samples of `(pid, seconds)`: a process in both
/// counts its difference, one only in `after` (it started meanwhile) all of its time; one only
/// in `before` (it exited) is lost.
pub fn used_between(before: &[(u32, f64)], after: &[(u32, f64)]) -> f64 {
    after
        .iter()
        .map(|(pid, now)| {
            let then = before
                .iter()
                .find(|(p, _)| p == pid)
                .map_or(0.0, |(_, s)| *s);
            now - then
        })
        .sum()
}

/// The postmaster and every process it started: its own time, the time of its children that
/// exited (which it waited for), and the time of those alive.
fn tree_s(postmaster: u32) -> Option<f64> {
    let root = stat(postmaster)?;
    let mut ticks = root.utime + root.stime + root.cutime + root.cstime;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(child) = stat(pid)
            && child.ppid == postmaster
        {
            ticks += child.utime + child.stime;
        }
    }
    Some(ticks as f64 * TICK_S)
}

/// The postmaster of the backend `pid`, if that backend runs on this machine.
pub fn postmaster_of(backend: u32) -> Option<u32> {
    let parent = stat(backend)?.ppid;
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
    comm.trim().starts_with("postgres").then_some(parent)
}

/// The machine's busy and total CPU seconds, every core.
fn machine() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4)?;
    Some(((total - idle) as f64 * TICK_S, total as f64 * TICK_S))
}
