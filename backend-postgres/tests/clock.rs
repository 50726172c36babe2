//! A server clock stepped back: leases are timestamps on PostgreSQL's clock, so a step back by an
//! hour gives every lease an hour more. A holder that died just before would keep its lock for
//! the hour; the next contender's step bounds a lease to its TTL from now (`prune.sql`).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

/// A schema of its own, and two lockers on it (two processes).
async fn schema_and_two_lockers() -> (String, Locker, Locker) {
    let harness = common::PgHarness::plain().await;
    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&harness.url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    (harness.schema.clone(), a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lease_is_bounded_by_its_ttl_after_a_clock_step_back() {
    let (schema, a, b) = schema_and_two_lockers().await;
    let ttl = Duration::from_secs(2);
    for kind in ["mutex", "semaphore"] {
        let name = format!("clock-back/{kind}");
        let crashed = match kind {
            "mutex" => a.lock(&name).ttl(ttl).acquire().await.unwrap(),
            _ => a.semaphore(&name, 1).ttl(ttl).acquire().await.unwrap(),
        };
        let token = crashed.fencing_token();
        let _lease = crashed.abandon();
        // What a step back of one hour does to the lease on the server.
        // (A mutex's holder that nobody waited for is kept in the lock's row.)
        common::run_as_owner(&format!(
            "UPDATE {schema}.entries SET expires_at = expires_at + interval '1 hour' WHERE token IS NOT NULL; \
             UPDATE {schema}.locks SET holder_expires = holder_expires + interval '1 hour' WHERE holder IS NOT NULL"
        ))
        .await;
        let next = match kind {
            "mutex" => b.lock(&name).ttl(ttl).timeout(Duration::from_secs(20)).acquire().await,
            _ => {
                b.semaphore(&name, 1)
                    .ttl(ttl)
                    .timeout(Duration::from_secs(20))
                    .acquire()
                    .await
            }
        }
        // The 20 s timeout: about one TTL after the contender saw the lease, not the hour.
        .unwrap_or_else(|e| panic!("{kind}: the dead holder's lock was not freed: {e}"));
        assert!(next.fencing_token() > token, "{kind}: tokens never go backwards");
        next.release().await.unwrap();
    }
}

/// The same for `try_acquire` (and so for every acquire with a zero timeout, a cron job's): a
/// dead holder kept in the lock's row whose lease ends further ahead than its TTL is bounded by
/// the full step. (Before, the one-statement try found the row busy and answered "held" without
/// the full step, for the whole hour.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_bounds_a_dead_row_holder_after_a_clock_step_back() {
    let (schema, a, b) = schema_and_two_lockers().await;
    let ttl = Duration::from_secs(2);
    let name = "clock-back/try";
    let crashed = a.lock(name).ttl(ttl).acquire().await.unwrap();
    let token = crashed.fencing_token();
    let _lease = crashed.abandon();
    common::run_as_owner(&format!(
        "UPDATE {schema}.locks SET holder_expires = holder_expires + interval '1 hour' WHERE holder IS NOT NULL"
    ))
    .await;
    let next = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(next) = b.lock(name).ttl(ttl).try_acquire().await.unwrap() {
                return next;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the dead holder's lock was not freed in 20 s (TTL 2 s)");
    assert!(next.fencing_token() > token, "tokens never go backwards");
    next.release().await.unwrap();
}
