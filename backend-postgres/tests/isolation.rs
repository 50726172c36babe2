//! A server, database or role whose default isolation is stricter than read committed
//! (`default_transaction_isolation`): locksmith's statements are written for read committed (a
//! statement that waited for a row lock reads the row as committed meanwhile), and its sessions
//! set it whatever the default.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, Harness};
use tokio::time::Instant;

/// Runs `sql` as the role of [`common::app_url`] (a role may set its own defaults).
async fn run_as_app(sql: &str) {
    let (client, connection) = tokio_postgres::connect(&common::app_url(), tokio_postgres::NoTls)
        .await
        .expect("connecting as the app role");
    let task = tokio::spawn(connection);
    client.batch_execute(sql).await.expect("running SQL as the app role");
    drop(client);
    let _ = task.await;
}

/// Bug: under a `repeatable read` default, two steps on one lock at once failed with "could not
/// serialize access due to concurrent update", which reached the caller as `Unavailable` (a
/// `try_acquire` or a `release` of a healthy server). Lockers take turns on one mutex for a few
/// seconds: no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_under_a_repeatable_read_default_is_not_an_error() {
    run_as_app("ALTER ROLE locksmith_app SET default_transaction_isolation = 'repeatable read'").await;
    let load = tokio::spawn(async {
        let harness = common::PgHarness::least_privilege().await;
        let name = unique_name("isolation");
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let locker = harness.locker().await;
            let name = name.clone();
            tasks.push(tokio::spawn(async move {
                let (mut errors, mut held) = (Vec::new(), 0);
                let end = Instant::now() + Duration::from_secs(3);
                while Instant::now() < end {
                    match locker.lock(&name).try_acquire().await {
                        Ok(Some(guard)) => {
                            held += 1;
                            if let Err(e) = guard.release().await {
                                errors.push(format!("release: {e}"));
                            }
                        }
                        Ok(None) => {}
                        Err(e) => errors.push(format!("try_acquire: {e}")),
                    }
                }
                locker.shutdown().await.expect("shutdown");
                (errors, held)
            }));
        }
        let (mut errors, mut held) = (Vec::new(), 0);
        for task in tasks {
            let (e, h) = task.await.expect("a locker's task");
            errors.extend(e);
            held += h;
        }
        (errors, held)
    })
    .await;
    // Whatever happened: the role's default goes back.
    run_as_app("ALTER ROLE locksmith_app RESET default_transaction_isolation").await;
    let (errors, held) = load.expect("the load");
    assert!(held > 0, "nobody held the lock");
    assert!(
        errors.is_empty(),
        "{} calls failed, e.g. {:?}",
        errors.len(),
        errors.first()
    );
}
