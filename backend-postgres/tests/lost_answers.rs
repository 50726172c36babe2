//! Steps whose transaction committed but whose answer never came (a commit held up past the
//! request timeout: a slow synchronous standby, a disk that stalls): sent again, they find what
//! the first one did instead of failing on it.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

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
