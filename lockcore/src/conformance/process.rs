//! Tests between real processes: a test binary runs itself as the other process. The binary has
//! a test named `child` that does nothing unless [`child_task`] says what to do (the words of the
//! environment variable [`CHILD_TASK`]); a test starts it with [`ChildProcess::spawn`], reads
//! what it says with [`ChildProcess::says`] (the child writes lines with [`say`]), and pauses,
//! resumes or kills it ([`ChildProcess::pause`], [`ChildProcess::resume`], [`ChildProcess::kill`]).
//!
//! ```ignore
//! #[test]
//! fn child() {
//!     let Some(args) = locksmith_core::conformance::process::child_task() else { return };
//!     // ... connect to args[1], take lock args[2], `say(format!("held {token}"))` ...
//! }
//!
//! #[tokio::test]
//! async fn a_paused_holder_is_told() {
//!     let mut holder = ChildProcess::spawn(&format!("hold {url} {name}"));
//!     let token = holder.says(Duration::from_secs(30)).await;
//!     holder.pause();
//!     // ...
//! }
//! ```

use std::fmt::Display;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::within;

/// The environment variable that tells a test binary's `child` test what to do.
pub const CHILD_TASK: &str = "LOCKSMITH_TEST_CHILD";

/// What precedes each line a child says, so that its parent tells them from libtest's output.
const MARK: &str = "CHILD ";

/// In the `child` test: the words of the task this process was started with, or `None` when the
/// test runs as an ordinary test (it should then return at once).
pub fn child_task() -> Option<Vec<String>> {
    let task = std::env::var(CHILD_TASK).ok()?;
    Some(task.split(' ').map(str::to_owned).collect())
}

/// In a child: says `line` to the parent ([`ChildProcess::says`] returns it).
pub fn say(line: impl Display) {
    println!("{MARK}{line}");
}

/// A copy of this test binary running its `child` test with a task.
pub struct ChildProcess {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildProcess {
    /// Starts this test binary as a child doing `task` (space-separated words, see
    /// [`child_task`]). The child is killed when this is dropped.
    pub fn spawn(task: &str) -> ChildProcess {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_TASK, task)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting the child process");
        let lines = BufReader::new(child.stdout.take().expect("the child's stdout")).lines();
        ChildProcess { child, lines }
    }

    /// The next line the child says (without its mark); panics after `limit` or if the child
    /// ended first.
    pub async fn says(&mut self, limit: Duration) -> String {
        let lines = &mut self.lines;
        within(limit, "the child's next line", async {
            loop {
                let line = lines.next_line().await.unwrap().expect("the child ended");
                // libtest writes its own words before the child's on the same line.
                if let Some(at) = line.find(MARK) {
                    return line[at + MARK.len()..].to_owned();
                }
            }
        })
        .await
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the child runs")
    }

    /// Pauses the child (SIGSTOP): it keeps its connections and files, and runs nothing.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused child run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Sends the child `signal`.
    fn signal(&self, signal: i32) {
        let pid = libc::pid_t::try_from(self.pid()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "signal {signal} to the child: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Kills the child (SIGKILL) and waits for it.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("killing the child");
    }

    /// Waits (at most `limit`) for the child to end.
    pub async fn wait(&mut self, limit: Duration) -> ExitStatus {
        within(limit, "the child to end", self.child.wait())
            .await
            .expect("waiting for the child")
    }
}
