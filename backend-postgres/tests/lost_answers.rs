//! Steps whose transaction committed but whose answer never came (a commit held up past the
//! request timeout: a slow synchronous standby, a disk that stalls): sent again, they find what
//! the first one did instead of failing on it. And requests that never arrived: a connection
//! dropped with a request unanswered closes with a reset, so that request is never delivered
//! after its clean-up.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::sockets::{self, lingers_of_local_ports};
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;

/// Holds the next commit of an insert into the entries for 2 s (a deferred constraint trigger
/// that sleeps once, at COMMIT, after the statements were answered): past a 1 s request timeout,
/// and the commit still lands.
async fn slow_next_join_commit(schema: &str) {
    common::run_as_owner(&format!(
        "CREATE TABLE \"{s}\".armed (x int); INSERT INTO \"{s}\".armed VALUES (1); \
         CREATE FUNCTION \"{s}\".slow_commit() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF EXISTS (SELECT 1 FROM \"{s}\".armed) THEN DELETE FROM \"{s}\".armed; \
         PERFORM pg_sleep(2); END IF; RETURN NEW; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON \"{s}\".entries \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \"{s}\".slow_commit();",
        s = schema
    ))
    .await;
}

/// A semaphore's acquire whose join committed unanswered (the permit was granted in it) sends the
/// join again: it finds its entry in line and takes the grant, one entry only. Before, the second
/// insert of the same entry failed on the primary key at every retry (`Unavailable`) until the
/// entry's lease ran out, while the permit was held for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_committed_unanswered_is_not_sent_twice() {
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&request_timeout=1s&ttl=20s", harness.url);
    let locker = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    // The lock's rows exist (the next join only inserts its entry).
    locker
        .semaphore("s", 1)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    slow_next_join_commit(&harness.schema).await;

    let permit = locker
        .semaphore("s", 1)
        .timeout(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the permit its first join was granted");
    let entries = harness
        .look
        .entries(
            locksmith_core::Family::Semaphore,
            &locksmith_core::driver::LockName::new("s").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    permit.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// Every connection of a locker closes with a reset (`SO_LINGER` 0): its one connection (steps,
/// renewals, LISTEN) and an advisory lock's session. A connection is dropped when a request on
/// it goes unanswered, and the request's clean-up goes over a new one; after a normal close, a
/// statement still held up in the network (a partition) would be delivered once it healed, after
/// that clean-up, and put a gone waiter back in the queue, to be granted a lock nobody uses until
/// its entry's lease ran out. Checked on the sockets themselves: this process's sockets whose
/// local ports the server lists for locksmith's sessions (this binary runs no proxy, whose
/// sockets to the server would be listed too).
#[tokio::test]
async fn every_connection_closes_with_a_reset() {
    let harness = common::PgHarness::plain().await;
    let locker = locksmith_postgres::connect(&BackendUrl::parse(&harness.url).unwrap())
        .await
        .unwrap();
    let advisory = format!("{}&layout=advisory", harness.url);
    let advisory = locksmith_postgres::connect(&BackendUrl::parse(&advisory).unwrap())
        .await
        .unwrap();
    let held = locker.lock(unique_name("linger")).acquire().await.unwrap();
    // An advisory lock's name is its bigint key.
    let key = (rand::random::<u32>() as i64 + 1).to_string();
    let session = advisory.lock(key).acquire().await.unwrap();

    let ports: Vec<u16> = common::query_as_owner(
        "SELECT client_port FROM pg_stat_activity \
         WHERE application_name = 'locksmith' AND client_port > 0",
    )
    .await
    .iter()
    .filter_map(|port| port.parse().ok())
    .collect();
    let lingers = lingers_of_local_ports(&ports);
    // The harness's own backend (1), the two lockers (1 each) and the advisory session.
    assert!(
        lingers.len() >= 4,
        "this process's sockets among the server's ports {ports:?}: {lingers:?}"
    );
    sockets::assert_each_closes_with_a_reset(&lingers);
    session.release().await.unwrap();
    held.release().await.unwrap();
    advisory.shutdown().await.unwrap();
    locker.shutdown().await.unwrap();
}
