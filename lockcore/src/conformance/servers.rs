//! Test support for fault tests: the repository's `scripts/backends`, which starts, kills, pauses
//! and restarts the real test servers, called from Rust.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The path of `scripts/backends`: `LOCKSMITH_BACKENDS_SCRIPT`, else the one in this repository.
fn script() -> String {
    std::env::var("LOCKSMITH_BACKENDS_SCRIPT")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/backends").to_owned())
}

/// A wall clock that a test moves, for the processes it starts under it: the clock shim
/// (`scripts/backends.d/clockshift.c`, an `LD_PRELOAD` library that shifts `CLOCK_REALTIME` by
/// the milliseconds written in the file `CLOCKSHIFT_FILE` names) and that offset file.
pub struct ClockShift {
    shim: PathBuf,
    offset_file: PathBuf,
}

impl ClockShift {
    /// Builds the shim into `dir` with `cc`, the offset at 0. Panics if it cannot be built.
    pub fn new(dir: &Path) -> ClockShift {
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/backends.d/clockshift.c");
        let shim = dir.join("clockshift.so");
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&shim)
            .arg(source)
            .status()
            .unwrap_or_else(|e| panic!("running cc for {source}: {e}"));
        assert!(built.success(), "building {source}");
        let clock = ClockShift {
            shim,
            offset_file: dir.join("offset"),
        };
        clock.set(0);
        clock
    }

    /// Moves the clock of every process under it to `ms` from the true time (the shim reads the
    /// file again at most 20 ms later).
    pub fn set(&self, ms: i64) {
        std::fs::write(&self.offset_file, ms.to_string()).expect("the clock's offset file");
    }

    /// What a process needs in its environment to run under this clock.
    pub fn env(&self) -> [(&'static str, &std::ffi::OsStr); 2] {
        [
            ("LD_PRELOAD", self.shim.as_os_str()),
            ("CLOCKSHIFT_FILE", self.offset_file.as_os_str()),
        ]
    }
}

/// Runs `scripts/backends ARGS` (e.g. `["kill", "etcd-2"]`, `["leader", "zk-ensemble"]`) and
/// returns its trimmed standard output. Panics with the script's error output if it fails: this is
/// test support, and a fault that could not be injected must fail the test.
pub fn backends(args: &[&str]) -> String {
    backends_with(args, &[])
}

/// [`backends`] with `env` added to the script's environment: e.g. `LOCKSMITH_BACKENDS_DIR` and
/// `LOCKSMITH_BACKENDS_PORT_OFFSET` for a server set of a test's own, or `LD_PRELOAD` for servers
/// under a [`ClockShift`].
pub fn backends_with(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> String {
    let mut command = Command::new("bash");
    command.arg(script()).args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output();
    let out = out.unwrap_or_else(|e| panic!("running scripts/backends {args:?}: {e}"));
    assert!(
        out.status.success(),
        "scripts/backends {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs a `scripts/backends` command when dropped — at the end of the test or when it panics — so
/// that a failing fault test does not leave a server down or paused for the tests after it.
#[must_use = "the command runs when this value is dropped"]
pub struct OnDrop {
    args: Vec<String>,
}

impl OnDrop {
    /// Starts server `id` again when dropped.
    pub fn start(id: &str) -> Self {
        OnDrop {
            args: vec!["start".into(), id.into()],
        }
    }

    /// Resumes (SIGCONT) server `id` when dropped.
    pub fn resume(id: &str) -> Self {
        OnDrop {
            args: vec!["resume".into(), id.into()],
        }
    }
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        let status = Command::new("bash").arg(script()).args(&self.args).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("scripts/backends {:?} failed: {status:?}", self.args);
        }
    }
}
