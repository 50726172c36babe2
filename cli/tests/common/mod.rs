//! Helpers for the CLI tests: run the real `locksmith` binary, read its output with bounded
//! waits, and the backend-independent test bodies that every backend's test file expands with
//! [`cli_suite!`].

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Every wait in these tests is bounded by this (generous: the machine is shared).
pub const LIMIT: Duration = Duration::from_secs(60);

/// A server the CLI tests run against.
pub trait Backend {
    /// The `--url` for locksmith.
    fn url(&self) -> String;
    /// Removes the holder of `name` on the server behind locksmith's back, as an operator would.
    fn delete_behind_back(&self, name: &str);
}

#[allow(unused_imports)] // not every test file uses it
pub use locksmith_core::conformance::env_url;

/// A lock name no other test (or earlier run) uses.
pub fn unique_name(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!(
        "cli-test/{test}/{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// `locksmith` with the given arguments (LOCKSMITH_URL cleared, so only `--url` counts), with
/// SIGINT, SIGQUIT and SIGHUP at their defaults: locksmith keeps a signal ignored that it started
/// with ignored (as a shell's background job starts with SIGINT, `nohup` with SIGHUP), and the
/// tests send them, whatever started the test run (`scripts/test &` in a script failed every
/// signal test). A test that wants one ignored sets it in a later `pre_exec`.
pub fn locksmith(args: &[&str]) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locksmith"));
    cmd.args(args)
        .env_remove("LOCKSMITH_URL")
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1");
    // SAFETY: runs in the forked child before exec and calls only signal(), which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd
}

/// What a finished `locksmith` printed.
#[derive(Debug)]
pub struct Output {
    /// The exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `locksmith ARGS` to completion (stdin empty), killing it after [`LIMIT`].
pub fn run(args: &[&str]) -> Output {
    Proc::spawn(locksmith(args)).finish()
}

/// A running `locksmith` whose stdout and stderr lines arrive on channels.
pub struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    seen_out: Vec<String>,
    seen_err: Vec<String>,
}

fn lines(reader: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Proc {
    /// Spawns `cmd` with piped stdin, stdout and stderr.
    pub fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start the locksmith binary");
        let stdout = lines(child.stdout.take().expect("piped stdout"));
        let stderr = lines(child.stderr.take().expect("piped stderr"));
        Proc {
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
            seen_out: Vec::new(),
            seen_err: Vec::new(),
        }
    }

    /// Spawns `locksmith ARGS`.
    pub fn locksmith(args: &[&str]) -> Proc {
        Proc::spawn(locksmith(args))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line; panics after [`LIMIT`] or when stdout closes first.
    pub fn next_line(&mut self) -> String {
        match self.stdout.recv_timeout(LIMIT) {
            Ok(line) => {
                self.seen_out.push(line.clone());
                line
            }
            Err(e) => {
                let _ = self.child.kill();
                let rest: Vec<String> = self.stderr.try_iter().collect();
                panic!(
                    "no stdout line from locksmith ({e}); stdout so far {:?}, stderr {rest:?}",
                    self.seen_out
                )
            }
        }
    }

    /// Waits until a stderr line contains `needle`; returns that line.
    pub fn wait_stderr(&mut self, needle: &str) -> String {
        let end = Instant::now() + LIMIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    self.seen_err.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    panic!(
                        "locksmith never printed {needle:?} on stderr ({e}); stderr: {:?}",
                        self.seen_err
                    )
                }
            }
        }
    }

    /// Writes to locksmith's stdin (which `run` passes on to CMD).
    pub fn write_stdin(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin
            .write_all(text.as_bytes())
            .and_then(|()| stdin.flush())
            .expect("cannot write to locksmith's stdin");
    }

    /// Closes locksmith's stdin.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `sig` to locksmith.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig} failed");
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the exit (closing stdin first), at most [`LIMIT`]; returns everything printed.
    pub fn finish(mut self) -> Output {
        self.stdin = None;
        self.exited()
    }

    /// Waits for the exit with stdin left open (for a `hold` that must end by itself), at most
    /// [`LIMIT`]; returns everything printed.
    pub fn exited(mut self) -> Output {
        let status = self.wait_exit();
        // The reader threads end at EOF, which follows the exit.
        let mut stdout = std::mem::take(&mut self.seen_out);
        stdout.extend(self.stdout.iter());
        let mut stderr = std::mem::take(&mut self.seen_err);
        stderr.extend(self.stderr.iter());
        Output {
            code: status.code(),
            signal: std::os::unix::process::ExitStatusExt::signal(&status),
            stdout: join(&stdout),
            stderr: join(&stderr),
        }
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let end = Instant::now() + LIMIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < end => thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = self.child.kill();
                    panic!(
                        "locksmith did not exit within {LIMIT:?}; stderr so far: {:?}",
                        self.seen_err
                    )
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn join(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Asserts the exit code, showing everything printed when it differs.
#[track_caller]
pub fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.code,
        Some(code),
        "unexpected exit code; stdout:\n{}stderr:\n{}",
        out.stdout,
        out.stderr
    );
}

/// Asserts a usage error: exit 2, one line on stderr, no panic or backtrace.
#[track_caller]
pub fn assert_clean_error(out: &Output, code: i32) {
    assert_code(out, code);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected a one-line reason, got {:?}", out.stderr);
    assert!(lines[0].starts_with("locksmith: "), "{:?}", lines[0]);
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "internal error"] {
        assert!(!out.stderr.contains(bad), "stderr mentions {bad:?}: {:?}", out.stderr);
    }
}

/// The fencing token `try`/`hold` printed.
#[track_caller]
pub fn token(line: &str) -> u64 {
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a fencing token: {line:?}"))
}

/// A TCP port on loopback that nothing listens on.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}
/// A [`locksmith_core::conformance::proxy::Proxy`] in front of the server of a test URL, with the
/// runtime it runs on (these tests are synchronous).
pub struct TestProxy {
    proxy: locksmith_core::conformance::proxy::Proxy,
    _runtime: tokio::runtime::Runtime,
}

impl TestProxy {
    /// A proxy to the (first) server of `url`.
    pub fn start(url: &str) -> TestProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let upstream = server_of(url);
        let proxy = runtime.block_on(locksmith_core::conformance::proxy::Proxy::start(&upstream));
        TestProxy {
            proxy,
            _runtime: runtime,
        }
    }

    /// `url` with its server replaced by this proxy.
    pub fn url(&self, url: &str) -> String {
        let server = server_of(url);
        url.replacen(&server, &self.proxy.addr(), 1)
    }

    /// Changes what the proxy forwards.
    pub fn set(&self, mode: locksmith_core::conformance::proxy::Mode) {
        self.proxy.set(mode);
    }
}

/// The `host:port` of the first server of a test URL
/// (`scheme://[user[:password]@]host:port[,...][/path][?query]`).
pub fn server_of(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, hosts)| hosts);
    hosts.split(',').next().unwrap_or(hosts).to_owned()
}

pub mod suite;
