//! A client whose wall clock jumps: `locksmith hold` runs under the clock shim
//! (`scripts/backends.d/clockshift.c`, an `LD_PRELOAD` library that shifts `CLOCK_REALTIME` by an
//! offset read from a file), and the test moves its clock an hour ahead and an hour back while it
//! holds a lock with a 2 s lease. locksmith times leases, renewals and timeouts on the monotonic
//! clock, so nothing may change: the holder keeps its lock through both steps (another process's
//! `try` is refused all along), releases it cleanly (exit 0), and the next holder's fencing token
//! is larger, also on `file://`, whose tokens are floored at the wall clock.
#![cfg(all(feature = "redis", feature = "file"))]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{assert_code, env_url, locksmith, run, token, unique_name, Proc};
use locksmith_core::conformance::servers::ClockShift;

const HOUR_MS: i64 = 3_600_000;

/// A shifted clock in a directory of its own, removed when dropped.
struct Shifted {
    dir: PathBuf,
    clock: ClockShift,
}

impl Shifted {
    fn new(what: &str) -> Shifted {
        let dir = std::env::temp_dir().join(format!("locksmith-cli-clock-{what}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let clock = ClockShift::new(&dir);
        Shifted { dir, clock }
    }

    /// Moves the shifted process's wall clock to `ms` from the true time, and gives the shim
    /// (which reads the file at most every 20 ms) and a renewal or two time to see it.
    fn shift(&self, ms: i64) {
        self.clock.set(ms);
        std::thread::sleep(Duration::from_secs(3));
    }

    /// `locksmith ARGS` under the shim.
    fn locksmith(&self, args: &[&str]) -> Proc {
        let mut cmd = locksmith(args);
        cmd.envs(self.clock.env());
        Proc::spawn(cmd)
    }
}

impl Drop for Shifted {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn steps_change_nothing(url: &str, what: &str) {
    let clock = Shifted::new(what);
    let name = unique_name("clock");
    let mut holder = clock.locksmith(&["--url", url, "hold", &name, "--ttl", "2s"]);
    let held = token(&holder.next_line());
    for step in [HOUR_MS, -HOUR_MS] {
        clock.shift(step);
        let other = run(&["--url", url, "try", &name]);
        assert_code(&other, 1); // still held, after the step and a lease and a half
    }
    holder.close_stdin();
    assert_code(&holder.finish(), 0); // released, never lost
                                      // The holder's clock still an hour back: a holder on it next, then one on true time.
    let mut again = clock.locksmith(&["--url", url, "hold", &name, "--ttl", "2s"]);
    let behind = token(&again.next_line());
    assert!(
        behind > held,
        "{what}: token {behind} after {held}, from a clock an hour back"
    );
    again.close_stdin();
    assert_code(&again.finish(), 0);
    let after = run(&["--url", url, "try", &name]);
    assert_code(&after, 0);
    assert!(token(&after.stdout) > behind, "{what}: the token went back");
}

#[test]
fn a_client_clock_step_changes_nothing_on_redis() {
    steps_change_nothing(&env_url("LOCKSMITH_TEST_REDIS"), "redis");
}

#[test]
fn a_client_clock_step_changes_nothing_on_file() {
    let dir = std::env::temp_dir().join(format!("locksmith-cli-clock-locks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("lock dir");
    let url = format!("file://{}", dir.display());
    steps_change_nothing(&url, "file");
    // The shim moves this client's clock (the file backend floors its tokens at the wall clock in
    // µs): an hour ahead, the token is an hour ahead; the next holder, on true time, still gets a
    // larger one.
    let clock = Shifted::new("file-ahead");
    clock.shift(HOUR_MS);
    let name = unique_name("clock-ahead");
    let mut ahead = clock.locksmith(&["--url", &url, "hold", &name]);
    let token_ahead = token(&ahead.next_line());
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    assert!(
        token_ahead > now_us + 3_000_000_000,
        "the shim did not move the client's clock"
    );
    ahead.close_stdin();
    assert_code(&ahead.finish(), 0);
    let after = run(&["--url", &url, "try", &name]);
    assert_code(&after, 0);
    assert!(
        token(&after.stdout) > token_ahead,
        "the token went back after the clock came back"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
