//! What `/proc` says of processes: their state, parent and process group (Linux).

/// A process as `/proc/PID/stat` describes it.
pub struct Stat {
    /// Its pid.
    pub pid: libc::pid_t,
    /// Its state (`Z`: a zombie, dead already).
    pub state: char,
    /// Its parent's pid.
    pub parent: libc::pid_t,
    /// Its process group.
    pub group: libc::pid_t,
}

impl Stat {
    /// Process `pid`, if it exists and `/proc` can be read.
    pub fn of(pid: libc::pid_t) -> Option<Stat> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after
        // its last ')'.
        let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
        Some(Stat {
            pid,
            state: fields.next()?.chars().next()?,
            parent: fields.next()?.parse().ok()?,
            group: fields.next()?.parse().ok()?,
        })
    }

    /// Whether it is alive (not a zombie waiting for its reaper).
    pub fn alive(&self) -> bool {
        self.state != 'Z'
    }
}

/// Every process `/proc` shows (`None` where it cannot be read).
pub fn all() -> Option<impl Iterator<Item = Stat>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(
        dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .filter_map(Stat::of),
    )
}
