//! A MariaDB primary and its replica (`scripts/backends`' `mysql-ha` pair, `up all`): the primary
//! killed at once and the replica promoted (`scripts/backends failover mysql-ha`), the clients
//! following it with the URL that names both (`mysql://u@ha1,ha2/db`: each connection goes to the
//! one that takes writes). Fencing tokens keep growing across it, and a holder whose lock the
//! promoted replica does not have is refused its guarded writes.
//!
//! - Semi-synchronous (the pair's setting): every grant was on the replica before anyone was told
//!   of it, so the holder keeps its lock and renews it on the new primary.
//! - Asynchronous (semi-synchronous replication turned off on the primary, the replica's receiving
//!   thread stopped): the last grants are lost with the primary, as `data_loss.rs` simulates with
//!   `UPDATE`s on one server; here a real replica misses them, and the clock floor still puts the
//!   next token above every one given before.
//! - A forwarder of the test's own in front of the primary (what a virtual IP or a proxy such as
//!   ProxySQL is to MySQL's failover setups), the URL naming it alone: that works too.
//! - The choice of a host: a replica, or a closed port, listed first is skipped for the primary;
//!   with none writable, `Unavailable` names each host. A primary demoted under its clients (made
//!   read only, its replica promoted: a switchover) is left for the new one at the first write
//!   it refuses.
//! - `replication=sync` (the default with several hosts) refuses a primary whose semi-synchronous
//!   replication is off (`Protocol`) or has gone on alone for want of an acknowledgement
//!   (`Unavailable`); `replication=async` takes it.
//!
//! The failovers disturb no other server; every locksmith-mysql test runs alone (nextest's
//! `alone` pass), and the ones here take turns. (About a minute in all.)

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith_core::conformance::servers::backends;
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockError, Locker};
use sqlx::Connection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The pair's URL (`scripts/backends up all` exports it): both members, the test user.
fn ha_url(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: run `eval \"$(scripts/backends up all)\"` first"))
}

/// `url` (of the pair's two hosts) with `host` in their place.
fn with_host(url: &str, host: &str) -> String {
    let parsed = BackendUrl::parse(url).unwrap();
    let hosts: Vec<String> = parsed.hosts.iter().map(|h| h.to_addr(3306)).collect();
    url.replacen(&hosts.join(","), host, 1)
}

/// `scripts/backends ARGS` off the runtime.
async fn servers(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        backends(&refs)
    })
    .await
    .unwrap()
}

/// The id and address of the pair's primary now.
async fn primary() -> (String, String) {
    let id = servers(&["leader", "mysql-ha"]).await;
    let address = servers(&["address", &id]).await;
    (id, address)
}

/// Runs `sql` on the server at `address` as the pair's admin user.
async fn as_admin(address: &str, sql: &str) {
    let url = with_host(&ha_url("LOCKSMITH_TEST_MYSQL_HA_ADMIN"), address);
    let mut c = sqlx::MySqlConnection::connect(&url)
        .await
        .expect("connecting as the admin user");
    sqlx::Executor::execute(&mut c, sql)
        .await
        .expect("running SQL as the admin user");
    let _ = c.close().await;
}

/// A forwarder in front of the pair's primary: new connections go to the server it points at,
/// and pointing it elsewhere ends the connections it carries (a virtual IP moved to the promoted
/// replica, or a proxy told of the failover).
struct Vip {
    addr: String,
    upstream: Arc<Mutex<String>>,
    moved: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Vip {
    async fn start(upstream: &str) -> Vip {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upstream = Arc::new(Mutex::new(upstream.to_owned()));
        let (moved, _) = watch::channel(0u64);
        let accept = tokio::spawn({
            let (upstream, moved) = (upstream.clone(), moved.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let to = upstream.lock().unwrap().clone();
                    let mut moved = moved.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(&to).await else {
                            return;
                        };
                        let _ = (client.set_nodelay(true), server.set_nodelay(true));
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = moved.changed() => {}
                        }
                    });
                }
            }
        });
        Vip {
            addr,
            upstream,
            moved,
            accept,
        }
    }

    fn point_at(&self, upstream: &str) {
        *self.upstream.lock().unwrap() = upstream.to_owned();
        self.moved.send_modify(|n| *n += 1);
    }
}

impl Drop for Vip {
    fn drop(&mut self) {
        self.accept.abort();
        self.moved.send_modify(|n| *n += 1);
    }
}

/// A database of the test's own on the pair, made on the primary (it replicates), and its URL
/// with `hosts` (`host:port,…`) in place of the pair's.
async fn database_on(hosts: &str, options: &str) -> (String, String) {
    let (_, address) = primary().await;
    let database = format!("locksmith_{:016x}", rand::random::<u64>());
    let base = with_host(&ha_url("LOCKSMITH_TEST_MYSQL_HA"), hosts);
    let (server, _) = base.rsplit_once('/').unwrap();
    as_admin(&address, &format!("CREATE DATABASE {database}")).await;
    (format!("{server}/{database}?{options}"), database)
}

/// [`database_on`] the URL that names both members, in the exported order.
async fn database(options: &str) -> (String, String) {
    let hosts: Vec<String> = BackendUrl::parse(&ha_url("LOCKSMITH_TEST_MYSQL_HA"))
        .unwrap()
        .hosts
        .iter()
        .map(|h| h.to_addr(3306))
        .collect();
    database_on(&hosts.join(","), options).await
}

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap_or_else(|e| panic!("connecting with {url}: {e}"))
}

/// The first column of the first row of `sql` on the server at `address`, as the admin user
/// (`sql` casts it to text).
async fn admin_value(address: &str, sql: &str) -> Option<String> {
    let url = with_host(&ha_url("LOCKSMITH_TEST_MYSQL_HA_ADMIN"), address);
    let mut c = sqlx::MySqlConnection::connect(&url)
        .await
        .expect("connecting as the admin user");
    let row = sqlx::query(sql).fetch_optional(&mut c).await.expect(sql);
    let _ = c.close().await;
    row.map(|r| {
        let v: Vec<u8> = sqlx::Row::try_get(&r, 0).expect("a text column");
        String::from_utf8_lossy(&v).into_owned()
    })
}

/// Waits until the primary at `address` has a replica acknowledging its commits (as
/// `scripts/backends`' `mysql_ha_synced`).
async fn wait_synced(address: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = admin_value(
            address,
            "SELECT CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS'",
        )
        .await;
        let clients = admin_value(
            address,
            "SELECT CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'",
        )
        .await;
        if status.as_deref() == Some("ON") && clients.is_some_and(|n| n != "0") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{address} has no semi-synchronous replica after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The id and address of the pair's replica now.
async fn replica() -> (String, String) {
    let (id, _) = primary().await;
    let other = if id == "mysql-ha1" { "mysql-ha2" } else { "mysql-ha1" };
    (other.to_owned(), servers(&["address", other]).await)
}

/// An address nothing listens on (a port bound, then closed).
async fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().to_string()
}

/// The tests take turns (each fails the pair over, or changes its primary's settings).
static PAIR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_keeps_the_holder_and_refuses_a_stale_token() {
    let _pair = PAIR.lock().await;
    // A TTL longer than the failover (the old primary made a replica again: several seconds on
    // a loaded machine, the new primary's commits waiting for it meanwhile).
    let (url, _) = database("ttl=12s&request_timeout=2s&connect_timeout=2s").await;
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("failover");

    let held = a.lock(&name).acquire().await.unwrap();
    let acquired = tokio::time::Instant::now();
    let first = held.fencing_token();
    held.guarded().put("k", "before").await.unwrap();

    // Killed at once, the replica promoted; the lockers' new connections find it (the URL names
    // both, and the old primary comes back as the new one's replica, read only).
    let promoted = servers(&["failover", "mysql-ha"]).await;
    let (now, _) = primary().await;
    assert_eq!(promoted, now, "failover printed {promoted:?}");

    // The promoted replica has the grant (semi-synchronous): the lock is not free there, and
    // the holder renews it there for longer than its TTL.
    // (b's first step may meet its connection to the dead primary and answer Unavailable.)
    let tried = match b.lock(&name).try_acquire().await {
        Err(LockError::Unavailable { .. }) => b.lock(&name).try_acquire().await,
        other => other,
    };
    assert!(tried.unwrap().is_none(), "the lock was free on the promoted replica");
    tokio::time::sleep_until(acquired + Duration::from_secs(13)).await;
    assert_eq!(held.lost_reason(), None, "the holder lost its lock to the failover");
    held.guarded()
        .put("k", "after")
        .await
        .expect("a guarded write on the new primary");

    // Its lease taken away behind its back (as an expiry would), the lock goes to b with a
    // greater token, and the old holder's writes are refused.
    let look = locksmith_mysql::MysqlBackend::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let n = look
        .delete_holders(Family::Mutex, &LockName::new(&name).unwrap())
        .await
        .unwrap();
    assert!(n > 0, "no holder row on the promoted replica");
    let next = b.lock(&name).acquire().await.unwrap();
    assert!(
        next.fencing_token() > first,
        "token {} after {first}: tokens must survive the failover",
        next.fencing_token()
    );
    let stale = held.guarded().put("k", "stale").await;
    assert!(matches!(stale, Err(LockError::NotHeld { .. })), "{stale:?}");
    next.guarded().put("k", "next").await.unwrap();
    assert_eq!(next.guarded().get("k").await.unwrap().as_deref(), Some(&b"next"[..]));
    next.release().await.unwrap();
    drop(held);
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_replica_loses_the_last_grants_and_tokens_still_grow() {
    let _pair = PAIR.lock().await;
    let (old, address) = primary().await;
    let replica = if old == "mysql-ha1" { "mysql-ha2" } else { "mysql-ha1" };
    // replication=async: the lockers' connections opened once the primary goes on alone (b's,
    // after the failover) are not refused.
    let (url, _) = database("ttl=8s&request_timeout=2s&connect_timeout=2s&replication=async").await;
    // Connected (the tables made and replicated) before the replica falls behind.
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("async");
    let guard = a.lock(&name).acquire().await.unwrap();
    let replicated = guard.fencing_token();
    guard.release().await.unwrap();

    // The primary alone: no acknowledgement awaited, the replica's receiving thread stopped
    // (a replica merely paused would still find the events in its socket's buffer when resumed).
    as_admin(&address, "SET GLOBAL rpl_semi_sync_master_enabled = OFF").await;
    let replica_address = servers(&["address", replica]).await;
    as_admin(&replica_address, "STOP SLAVE IO_THREAD").await;
    let mut last = replicated;
    for _ in 0..3 {
        let guard = a.lock(&name).acquire().await.unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    let held = a.lock(&name).acquire().await.unwrap();
    assert!(held.fencing_token() > last);
    last = held.fencing_token();
    held.guarded().put("k", "on the old primary").await.unwrap();

    // The primary dies with those commits; the replica never gets them.
    let promoted = servers(&["failover", "mysql-ha"]).await;
    assert_eq!(promoted, replica, "failover printed {promoted:?}");

    // The lock is free on the promoted replica (its grant was lost): b gets it, with a token
    // above every one given before, and the old holder's write is refused.
    // (b's first step may meet its connection to the dead primary and answer Unavailable.)
    let tried = match b.lock(&name).try_acquire().await {
        Err(LockError::Unavailable { .. }) => b.lock(&name).try_acquire().await,
        other => other,
    };
    let next = tried
        .unwrap()
        .expect("the lock is held on the promoted replica: it did not lose the last grants");
    assert!(
        next.fencing_token() > last,
        "token {} after {last} once the replica lost the last grants",
        next.fencing_token()
    );
    let stale = held.guarded().put("k", "stale").await;
    assert!(matches!(stale, Err(LockError::NotHeld { .. })), "{stale:?}");
    assert_eq!(next.guarded().get("k").await.unwrap(), None, "the lost write came back");
    next.guarded().put("k", "next").await.unwrap();
    next.release().await.unwrap();
    drop(held);
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}

/// A URL naming one address, a forwarder's, that the failover moves to the promoted replica: a
/// virtual IP, or a proxy told of the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_ip_in_front_of_the_primary_also_works() {
    let _pair = PAIR.lock().await;
    let (_, address) = primary().await;
    let vip = Vip::start(&address).await;
    let (url, _) = database_on(&vip.addr, "ttl=12s&request_timeout=2s&connect_timeout=2s").await;
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("vip");
    let held = a.lock(&name).acquire().await.unwrap();
    let acquired = tokio::time::Instant::now();
    let first = held.fencing_token();

    let promoted = servers(&["failover", "mysql-ha"]).await;
    let (now, address) = primary().await;
    assert_eq!(promoted, now, "failover printed {promoted:?}");
    vip.point_at(&address);

    let tried = match b.lock(&name).try_acquire().await {
        Err(LockError::Unavailable { .. }) => b.lock(&name).try_acquire().await,
        other => other,
    };
    assert!(tried.unwrap().is_none(), "the lock was free on the promoted replica");
    tokio::time::sleep_until(acquired + Duration::from_secs(13)).await;
    assert_eq!(held.lost_reason(), None, "the holder lost its lock to the failover");
    held.release().await.unwrap();
    let next = b.lock(&name).acquire().await.unwrap();
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_or_a_closed_port_listed_first_is_skipped_for_the_primary() {
    let _pair = PAIR.lock().await;
    let ((_, primary_address), (_, replica_address)) = (primary().await, replica().await);
    let closed = closed_port().await;
    let hosts = format!("{closed},{replica_address},{primary_address}");
    let (url, database) = database_on(&hosts, "request_timeout=2s&connect_timeout=3s").await;
    // Connecting makes the tables: a write, which the replica would refuse.
    let a = connect(&url).await;
    let name = unique_name("skip");
    let held = a.lock(&name).acquire().await.unwrap();
    held.guarded().put("k", "on the primary").await.unwrap();
    // The grant is on the primary (and replicated: the tables are made there too), in the lock's
    // row or in the queue.
    let holders = admin_value(
        &primary_address,
        &format!(
            "SELECT CAST((SELECT COUNT(*) FROM {database}.locksmith_entries WHERE held = 1) \
             + (SELECT COUNT(*) FROM {database}.locksmith_locks WHERE holder IS NOT NULL) AS CHAR)"
        ),
    )
    .await;
    assert_eq!(holders.as_deref(), Some("1"));
    held.release().await.unwrap();
    a.shutdown().await.unwrap();

    // No host that takes writes: Unavailable (a failover may be under way), each host named.
    let url = with_host(&url, &format!("{closed},{replica_address}"));
    let refused = locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap()).await;
    let Err(LockError::Unavailable { message, .. }) = &refused else {
        panic!("{:?}", refused.map(|_| ()))
    };
    assert!(message.contains(&closed), "{message}");
    assert!(
        message.contains(&format!("{replica_address} takes no writes")),
        "{message}"
    );
}

/// A switchover: the primary made read only under its clients, its replica promoted, the old
/// primary made its replica. The holder's connections, still open to the demoted primary, are
/// refused their writes (error 1290): they are opened again, to the new primary, and the holder
/// keeps its lock past its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_for_the_promoted_replica() {
    let _pair = PAIR.lock().await;
    let ((_, old), (_, new)) = (primary().await, replica().await);
    let (url, _) = database("ttl=6s&request_timeout=2s&connect_timeout=2s").await;
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("demoted");
    let held = a.lock(&name).acquire().await.unwrap();
    let acquired = tokio::time::Instant::now();
    held.guarded().put("k", "before").await.unwrap();

    as_admin(&old, "SET GLOBAL read_only = ON").await;
    let applied = admin_value(&old, "SELECT @@global.gtid_binlog_pos").await.unwrap();
    let waited = admin_value(&new, &format!("SELECT CAST(MASTER_GTID_WAIT('{applied}', 30) AS CHAR)")).await;
    assert_eq!(
        waited.as_deref(),
        Some("0"),
        "the replica did not apply up to {applied}"
    );
    as_admin(
        &new,
        "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL rpl_semi_sync_master_enabled = ON; SET GLOBAL read_only = OFF",
    )
    .await;
    let (host, port) = new.rsplit_once(':').unwrap();
    as_admin(
        &old,
        &format!(
            "SET GLOBAL rpl_semi_sync_master_enabled = OFF; CHANGE MASTER TO MASTER_HOST='{host}', \
             MASTER_PORT={port}, MASTER_USER='locksmith_repl', MASTER_PASSWORD='locksmith-repl-pw', \
             MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1; START SLAVE"
        ),
    )
    .await;
    wait_synced(&new).await;
    assert_eq!(primary().await.1, new);

    // The holder renews on the new primary past its TTL; b finds the lock held there.
    tokio::time::sleep_until(acquired + Duration::from_secs(8)).await;
    assert_eq!(
        held.lost_reason(),
        None,
        "the holder lost its lock on the demoted primary"
    );
    let tried = match b.lock(&name).try_acquire().await {
        Err(LockError::Unavailable { .. }) => b.lock(&name).try_acquire().await,
        other => other,
    };
    assert!(tried.unwrap().is_none(), "the lock was free on the new primary");
    held.guarded()
        .put("k", "after")
        .await
        .expect("a guarded write on the new primary");
    held.release().await.unwrap();
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_sync_refuses_a_primary_without_semi_synchronous_replication() {
    let _pair = PAIR.lock().await;
    let (_, address) = primary().await;
    let (url, _) = database("request_timeout=2s&connect_timeout=2s").await;
    let one_host = with_host(&url, &address);
    as_admin(&address, "SET GLOBAL rpl_semi_sync_master_enabled = OFF").await;
    let connect_to = |url: String| async move { locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap()).await };
    let default = connect_to(url.clone()).await;
    let sync_one = connect_to(format!("{one_host}&replication=sync")).await;
    let async_many = connect_to(format!("{url}&replication=async")).await;
    let async_one = connect_to(one_host.clone()).await;
    as_admin(&address, "SET GLOBAL rpl_semi_sync_master_enabled = ON").await;
    wait_synced(&address).await;

    // A setting no retry changes: refused at once, the fix named.
    for (what, refused) in [
        ("two hosts, no option", &default),
        ("one host, replication=sync", &sync_one),
    ] {
        match refused {
            Err(LockError::Protocol(message)) => {
                assert!(message.contains("replication=async"), "{what}: {message}");
                assert!(message.contains(&address), "{what}: {message}");
            }
            other => panic!("{what}: {:?}", other.as_ref().map(|_| ())),
        }
    }
    for (what, taken) in [("two hosts, replication=async", async_many), ("one host", async_one)] {
        let locker = taken.unwrap_or_else(|e| panic!("{what}: {e}"));
        let guard = locker.lock(unique_name("async")).acquire().await.unwrap();
        guard.release().await.unwrap();
        locker.shutdown().await.unwrap();
    }
}

/// A primary whose replica stopped acknowledging goes on alone once a commit has waited
/// `rpl_semi_sync_master_timeout`: `replication=sync` refuses it as `Unavailable` until the
/// replica is back and has caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_sync_waits_out_a_primary_gone_on_alone() {
    let _pair = PAIR.lock().await;
    let ((_, address), (_, replica_address)) = (primary().await, replica().await);
    let (url, database) = database("request_timeout=2s&connect_timeout=2s").await;
    let timeout = admin_value(&address, "SELECT CAST(@@global.rpl_semi_sync_master_timeout AS CHAR)")
        .await
        .unwrap();
    as_admin(&replica_address, "STOP SLAVE IO_THREAD").await;
    as_admin(
        &address,
        &format!(
            "SET GLOBAL rpl_semi_sync_master_timeout = 200; CREATE TABLE {database}.t (i INT); \
             INSERT INTO {database}.t VALUES (0)"
        ),
    )
    .await;
    let alone = locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap()).await;
    // Back: the replica catches up (a commit to acknowledge), and the primary waits for it again.
    as_admin(&replica_address, "START SLAVE IO_THREAD").await;
    as_admin(
        &address,
        &format!("SET GLOBAL rpl_semi_sync_master_timeout = {timeout}; INSERT INTO {database}.t VALUES (1)"),
    )
    .await;
    wait_synced(&address).await;
    match &alone {
        Err(LockError::Unavailable { message, .. }) => {
            assert!(message.contains("Rpl_semi_sync_master_status"), "{message}")
        }
        other => panic!("{:?}", other.as_ref().map(|_| ())),
    }
    let locker = connect(&url).await;
    locker.shutdown().await.unwrap();
}
