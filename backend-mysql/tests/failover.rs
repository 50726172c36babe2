//! A MariaDB primary and its replica (`scripts/backends`' `mysql-ha` pair, `up all`): the primary
//! killed at once and the replica promoted (`scripts/backends failover mysql-ha`), the clients
//! following it through a forwarder of the test's own (what a virtual IP or a proxy such as
//! ProxySQL is to MySQL's failover setups: `mysql://` takes one host). Fencing tokens keep
//! growing across it, and a holder whose lock the promoted replica does not have is refused its
//! guarded writes.
//!
//! - Semi-synchronous (the pair's setting): every grant was on the replica before anyone was told
//!   of it, so the holder keeps its lock and renews it on the new primary.
//! - Asynchronous (semi-synchronous replication turned off on the primary, the replica's receiving
//!   thread stopped): the last grants are lost with the primary, as `data_loss.rs` simulates with
//!   `UPDATE`s on one server; here a real replica misses them, and the clock floor still puts the
//!   next token above every one given before.
//!
//! The failover disturbs no other server; every locksmith-mysql test runs alone (nextest's
//! `alone` pass), and the two here take turns. (About 20 s in all.)

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
/// through `vip`.
async fn database(vip: &Vip, options: &str) -> (String, String) {
    let (_, address) = primary().await;
    let database = format!("locksmith_{:016x}", rand::random::<u64>());
    let base = with_host(&ha_url("LOCKSMITH_TEST_MYSQL_HA"), &vip.addr);
    let (server, _) = base.rsplit_once('/').unwrap();
    as_admin(&address, &format!("CREATE DATABASE {database}")).await;
    (format!("{server}/{database}?{options}"), database)
}

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .expect("connecting through the forwarder")
}

/// The tests take turns (each fails the pair over).
static PAIR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_keeps_the_holder_and_refuses_a_stale_token() {
    let _pair = PAIR.lock().await;
    let (_, address) = primary().await;
    let vip = Vip::start(&address).await;
    // A TTL longer than the failover (the old primary made a replica again: several seconds on
    // a loaded machine, the new primary's commits waiting for it meanwhile).
    let (url, _) = database(&vip, "ttl=12s&request_timeout=2s&connect_timeout=2s").await;
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("failover");

    let held = a.lock(&name).acquire().await.unwrap();
    let acquired = tokio::time::Instant::now();
    let first = held.fencing_token();
    held.guarded().put("k", "before").await.unwrap();

    // Killed at once, the replica promoted; the forwarder follows it.
    let promoted = servers(&["failover", "mysql-ha"]).await;
    let (now, address) = primary().await;
    assert_eq!(promoted, now, "failover printed {promoted:?}");
    vip.point_at(&address);

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
    let vip = Vip::start(&address).await;
    let (url, _) = database(&vip, "ttl=8s&request_timeout=2s&connect_timeout=2s").await;
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
    let (_, address) = primary().await;
    vip.point_at(&address);

    // The lock is free on the promoted replica (its grant was lost): b gets it, with a token
    // above every one given before, and the old holder's write is refused.
    let next = b
        .lock(&name)
        .try_acquire()
        .await
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
