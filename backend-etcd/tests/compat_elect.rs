//! `layout=go-mutex` elections: the keys of etcd's Go `concurrency.Election`, as used by
//! `etcdctl elect NAME PROPOSAL` (campaign) and `etcdctl elect -l NAME` (observe). etcdctl and
//! locksmith candidates queue in one election, see one leader and hand leadership over both
//! ways. Against `LOCKSMITH_TEST_ETCD`, with the `etcdctl` binary (Debian package
//! `etcd-client`). The Go layout has no semaphores or read-write locks: they are refused.

mod common;

use std::process::Stdio;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockError, Locker};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const PATIENCE: Duration = Duration::from_secs(30);

fn base() -> String {
    common::env_url("LOCKSMITH_TEST_ETCD")
}

async fn go_locker() -> Locker {
    common::init_tracing();
    let url = BackendUrl::parse(&common::with_query(&base(), "layout=go-mutex&ttl=2s")).expect("url");
    locksmith_etcd::connect(&url).await.expect("connect")
}

/// One `etcdctl elect` process, killed when dropped; its output read line by line.
struct Etcdctl {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Etcdctl {
    /// `etcdctl elect NAME PROPOSAL`: campaigns, prints its key and value once it leads, and
    /// resigns on SIGINT.
    fn campaign(name: &str, proposal: &str) -> Etcdctl {
        Self::spawn(&[name, proposal])
    }

    /// `etcdctl elect -l NAME`: prints the key and value of each leader it observes.
    fn listen(name: &str) -> Etcdctl {
        Self::spawn(&["-l", name])
    }

    fn spawn(args: &[&str]) -> Etcdctl {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", common::endpoints(&base()).join(",")))
            .arg("elect")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("run etcdctl (Debian package etcd-client)");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Etcdctl { child, lines }
    }

    /// The next leader it prints: its key and value (two lines).
    async fn next_leader(&mut self, what: &str) -> (String, String) {
        within(PATIENCE, what, async {
            let key = self.lines.next_line().await.expect("read").expect("a key line");
            let value = self.lines.next_line().await.expect("read").expect("a value line");
            (key, value)
        })
        .await
    }

    /// Asserts that it prints nothing for a while (it waits to lead).
    async fn stays_quiet(&mut self, what: &str) {
        let early = tokio::time::timeout(Duration::from_millis(500), self.lines.next_line()).await;
        assert!(early.is_err(), "{what}: etcdctl printed {early:?}");
    }

    /// SIGINT, on which `etcdctl elect` resigns and exits; waits for the exit.
    async fn interrupt(mut self) {
        if let Some(pid) = self.child.id() {
            let status = std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status()
                .expect("kill -INT");
            assert!(status.success());
        }
        let status = within(PATIENCE, "etcdctl exiting on SIGINT", self.child.wait())
            .await
            .expect("wait");
        assert!(status.success(), "etcdctl elect exited with {status}");
    }
}

/// The key of a Go-layout candidate: `NAME/<lease id in lower-case hex>`.
fn assert_go_key(name: &str, key: &str) {
    let lease = key.strip_prefix(&format!("{name}/")).unwrap_or_else(|| panic!("{key}"));
    assert!(i64::from_str_radix(lease, 16).is_ok(), "{key}");
}

/// etcdctl leads: locksmith sees it as the leader (read and observed), a locksmith campaign waits
/// in line behind it and `try_acquire` does not lead; etcdctl resigns (SIGINT) and locksmith
/// leads, with a greater term, seen by the observer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_leads_then_hands_over_to_locksmith() {
    let name = unique_name("elect_etcdctl_first");
    let mut etcdctl = Etcdctl::campaign(&name, "etcdctl-proposal");
    let (key, value) = etcdctl.next_leader("etcdctl leading").await;
    assert_go_key(&name, &key);
    assert_eq!(value, "etcdctl-proposal");

    let (locker, watcher) = (go_locker().await, go_locker().await);
    let election = locker.election(&name);
    let leader = election.leader().await.expect("leader").expect("etcdctl leads");
    assert_eq!(
        (leader.value.as_str(), leader.holder_id.as_str()),
        ("etcdctl-proposal", key.as_str())
    );
    let admin = common::admin(&base()).await;
    let kv = admin.kv_client().get(key.as_str(), None).await.expect("get");
    assert_eq!(
        leader.term,
        kv.kvs()[0].create_revision() as u64,
        "the term is the create revision"
    );
    let mut observed = watcher.election(&name).observe().await.expect("observe");
    assert_eq!(observed.leader(), Some(leader.clone()));

    assert!(election
        .campaign("locksmith")
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    let campaign = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("locksmith").acquire().await }
    });
    within(PATIENCE, "the locksmith candidate queued", async {
        while common::keys_under(&admin, &format!("{name}/")).await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!campaign.is_finished(), "locksmith led while etcdctl did");

    etcdctl.interrupt().await;
    let lead = within(PATIENCE, "locksmith leading after etcdctl resigned", campaign)
        .await
        .expect("task")
        .expect("campaign");
    assert!(lead.term() > leader.term);
    assert_go_key(&name, &lead.guard().lease().holder_id);
    let now = election.leader().await.expect("leader").expect("a leader");
    assert_eq!((now.value.as_str(), now.term), ("locksmith", lead.term()));
    let seen = within(PATIENCE, "the observer seeing locksmith lead", async {
        loop {
            match observed.changed().await.expect("observing") {
                Some(l) if l.value == "locksmith" => return l,
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(seen.term, lead.term());
    lead.resign().await.expect("resign");
    assert_eq!(election.leader().await.expect("leader"), None);
}

/// locksmith leads: `etcdctl elect -l` prints locksmith's key and value, an `etcdctl elect`
/// campaign waits until locksmith resigns and then leads (and the listener prints it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_leads_etcdctl_listens_and_waits() {
    let name = unique_name("elect_locksmith_first");
    let locker = go_locker().await;
    let lead = locker
        .election(&name)
        .campaign("locksmith-value")
        .acquire()
        .await
        .expect("campaign");
    let my_key = lead.guard().lease().holder_id.clone();
    assert_go_key(&name, &my_key);

    let mut listener = Etcdctl::listen(&name);
    let (key, value) = listener.next_leader("etcdctl elect -l printing the leader").await;
    assert_eq!((key.as_str(), value.as_str()), (my_key.as_str(), "locksmith-value"));

    let mut candidate = Etcdctl::campaign(&name, "etcdctl-proposal");
    let admin = common::admin(&base()).await;
    within(PATIENCE, "the etcdctl candidate queued", async {
        while common::keys_under(&admin, &format!("{name}/")).await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    candidate.stays_quiet("etcdctl led while locksmith did").await;
    let leader = locker
        .election(&name)
        .leader()
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(leader.value, "locksmith-value");

    let term = lead.term();
    lead.resign().await.expect("resign");
    let (key, value) = candidate.next_leader("etcdctl leading after locksmith resigned").await;
    assert_go_key(&name, &key);
    assert_eq!(value, "etcdctl-proposal");
    let (seen_key, seen_value) = listener.next_leader("etcdctl elect -l printing the new leader").await;
    assert_eq!((seen_key, seen_value.as_str()), (key.clone(), "etcdctl-proposal"));
    let now = locker
        .election(&name)
        .leader()
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(
        (now.value.as_str(), now.holder_id.as_str()),
        ("etcdctl-proposal", key.as_str())
    );
    assert!(now.term > term);

    candidate.interrupt().await;
    listener.interrupt().await;
    assert_eq!(locker.election(&name).leader().await.expect("leader"), None);
}

/// The Go layout has the keys of Go's Mutex and Election only: a semaphore or a read-write lock
/// there is `InvalidOption`, saying to use the default layout, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_layout_refuses_semaphores_and_rwlocks() {
    let name = unique_name("go_layout_refuses");
    let locker = go_locker().await;
    let refused = [
        locker.semaphore(&name, 2).try_acquire().await.map(|_| ()),
        locker.semaphore(&name, 2).acquire().await.map(|_| ()),
        locker.rwlock(&name).read().acquire().await.map(|_| ()),
        locker.rwlock(&name).write().try_acquire().await.map(|_| ()),
    ];
    for result in refused {
        match result {
            Err(LockError::InvalidOption(why)) => assert!(why.contains("default layout"), "{why}"),
            other => panic!("expected InvalidOption, got {other:?}"),
        }
    }
    let admin = common::admin(&base()).await;
    assert!(common::keys_under(&admin, &format!("{name}/")).await.is_empty());
}
