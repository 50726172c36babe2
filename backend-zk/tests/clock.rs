//! Clock jumps on a real ZooKeeper server: a ZooKeeper of this test's own (`scripts/backends start
//! zk` in a state directory and port range of its own) runs under the clock shim in
//! `scripts/backends`'s clock mode (`LOCKSMITH_BACKENDS_CLOCKS=1`: `scripts/backends.d/clockshift.c`,
//! an `LD_PRELOAD` library that shifts the JVM's wall clock), and the test steps it an hour either
//! way (`scripts/backends clock zk MS`) while locks are held. ZooKeeper times sessions on a monotonic clock (`System.nanoTime`), so a step must
//! change nothing: a live holder keeps its lock, a holder cut off loses it one session timeout
//! later (not an hour later), and fencing tokens grow.

mod common;

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::servers::backends_with;
use locksmith_core::conformance::unique_name;
use zookeeper_client as zk;

/// ZooKeeper's client port in `scripts/backends` before the port offset (zk.sh).
const ZK_PORT: u16 = 21810;
const HOUR_MS: i64 = 3_600_000;
/// The lockers' session timeout: a cut-off holder's lock is free about this long after the cut.
const SESSION: &str = "session_timeout=3000ms";

/// A ZooKeeper whose wall clock the test moves; stopped (`scripts/backends down`) when dropped.
struct ShiftedZk {
    dir: PathBuf,
    offset: u16,
}

impl ShiftedZk {
    fn start() -> ShiftedZk {
        let dir = std::env::temp_dir().join(format!("locksmith-zk-clock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        // A port offset whose ZooKeeper port is free (the shared test servers use offset 0).
        let offset = (2000..6000u16)
            .step_by(37)
            .find(|o| TcpListener::bind(("127.0.0.1", ZK_PORT + o)).is_ok())
            .expect("a free port for the test's ZooKeeper");
        let zk = ShiftedZk { dir, offset };
        zk.backends(&["start", "zk"]);
        zk
    }

    /// `scripts/backends ARGS` on this test's server set, in the clock mode.
    fn backends(&self, args: &[&str]) -> String {
        let offset = self.offset.to_string();
        let state = self.dir.join("state");
        let env: [(&str, &OsStr); 3] = [
            ("LOCKSMITH_BACKENDS_DIR", state.as_os_str()),
            ("LOCKSMITH_BACKENDS_PORT_OFFSET", OsStr::new(&offset)),
            ("LOCKSMITH_BACKENDS_CLOCKS", OsStr::new("1")),
        ];
        backends_with(args, &env)
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", ZK_PORT + self.offset)
    }

    /// Moves the server's wall clock to `ms` from the true time (the shim reads it within 20 ms).
    async fn shift(&self, ms: i64) {
        self.backends(&["clock", "zk", &ms.to_string()]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for ShiftedZk {
    fn drop(&mut self) {
        self.backends(&["down"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server's wall clock, in ms: the creation time it stamps on a node.
async fn server_clock_ms(admin: &zk::Client) -> i64 {
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (stat, _) = admin
        .create("/clock-probe-", &[], &ephemeral)
        .await
        .expect("probe node");
    stat.ctime
}

/// Asserts that the server's clock is `step` ms from true time (within a minute): the shim works.
async fn assert_shifted(admin: &zk::Client, step: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let off = server_clock_ms(admin).await - now;
    assert!(
        (off - step).abs() < 60_000,
        "the server's clock is {off} ms off, not {step}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_either_way_changes_nothing() {
    let zk = ShiftedZk::start();
    let base = format!("zk://{}", zk.addr());
    let (a, b) = (
        common::locker(&base, SESSION).await,
        common::locker(&base, SESSION).await,
    );
    let admin = common::admin(&base).await;

    // A live holder keeps its lock through a step forward, a step back, and back to true time.
    let name = unique_name("clock");
    let held = a.lock(&name).acquire().await.expect("a holds");
    for step in [HOUR_MS, -HOUR_MS, 0] {
        zk.shift(step).await;
        assert_shifted(&admin, step).await;
        tokio::time::sleep(Duration::from_secs(6)).await; // two session timeouts
        assert!(held.is_held(), "the holder lost its lock after a {step} ms step");
        let other = b.lock(&name).try_acquire().await.expect("try");
        assert!(other.is_none(), "a second holder after a {step} ms step");
    }
    held.release().await.expect("release");

    // A holder cut off from the server (frozen both ways, as by a partition): with the clock an
    // hour back, then an hour ahead, its lock is free one session timeout later, token up.
    for step in [-HOUR_MS, HOUR_MS] {
        zk.shift(0).await;
        let proxy = Proxy::start(&zk.addr()).await;
        let cut = common::locker(&format!("zk://{}", proxy.addr()), SESSION).await;
        let name = unique_name("clock-cut");
        let dead = cut.lock(&name).acquire().await.expect("the holder behind the proxy");
        let token = dead.fencing_token();
        zk.shift(step).await;
        assert_shifted(&admin, step).await;
        proxy.set(Mode::Freeze {
            to_server: true,
            to_client: true,
        });
        let next = b
            .lock(&name)
            .timeout(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("after a {step} ms step a cut-off holder's lock stayed held: {e}"));
        assert!(
            next.fencing_token() > token,
            "the token went back after a {step} ms step"
        );
        next.release().await.expect("release");
        drop(dead.abandon());
        proxy.set(Mode::Cut);
        drop(cut);
    }
    zk.shift(0).await;
}
