//! Function libraries (Redis 7): locksmith's scripts run as `FCALL`s of libraries it loads at
//! connect; a server that lost them (`FUNCTION FLUSH` here, a restart without persistence, a
//! promoted replica without them) is sent them again by the next call, a holder's release and a
//! queued waiter's step among them; and a user whose ACL refuses functions gets plain scripts
//! (`EVALSHA`). The tests here run one at a time: one of them flushes the server's functions.

mod common;

use std::time::Duration;

use locksmith_core::conformance::unique_name;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How many calls of `command` the server has run.
async fn calls(admin: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    common::command_counts(admin).await.get(command).copied().unwrap_or(0)
}

/// How many of locksmith's libraries the server has loaded.
async fn libraries(admin: &mut redis::aio::MultiplexedConnection) -> usize {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("locksmith_*")
        .query_async(admin)
        .await
        .expect("FUNCTION LIST");
    list.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_function_calls_of_a_library_loaded_at_connect() {
    let _serial = SERIAL.lock().await;
    common::init_logs();
    let url = common::redis_url();
    let mut admin = common::admin(&url).await;
    let locker = common::locker(&url).await;
    assert!(
        libraries(&mut admin).await > 0,
        "connecting loaded no locksmith library"
    );
    let (fcalls, evalshas) = (calls(&mut admin, "fcall").await, calls(&mut admin, "evalsha").await);
    let name = unique_name("functions");
    for _ in 0..5 {
        let guard = locker.lock(&name).acquire().await.expect("acquire");
        guard.release().await.expect("release");
    }
    let permit = locker.semaphore(&name, 2).acquire().await.expect("a permit");
    permit.release().await.expect("release the permit");
    let fcalls = calls(&mut admin, "fcall").await - fcalls;
    let evalshas = calls(&mut admin, "evalsha").await - evalshas;
    // 12 acquires and releases; the other tests of this binary wait (SERIAL), so only a
    // watchdog batch of another binary's locker could add EVALSHAs here.
    assert!(fcalls >= 12, "{fcalls} FCALLs for 12 script calls");
    assert!(evalshas < 12, "{evalshas} EVALSHAs: the locks ran as plain scripts");
    locker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_the_library_is_sent_it_again() {
    let _serial = SERIAL.lock().await;
    common::init_logs();
    let url = common::redis_url();
    let mut admin = common::admin(&url).await;
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let name = unique_name("functions_flushed");
    let held = a
        .lock(&name)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let token = held.fencing_token();
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).timeout(Duration::from_secs(20)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await; // queued

    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .exec_async(&mut admin)
        .await
        .expect("FUNCTION FLUSH");
    assert_eq!(libraries(&mut admin).await, 0);
    // The release (never sent twice: a "not found" call did not run) loads the library again,
    // and wakes the waiter, whose step finds the function.
    held.release().await.expect("release after the flush");
    let next = waiter
        .await
        .expect("join")
        .expect("the waiter gets the lock after the flush");
    assert!(next.fencing_token() > token);
    assert!(libraries(&mut admin).await > 0, "nothing loaded the library again");
    next.release().await.expect("release");

    // The same for the other kinds' scripts, from a flush before an acquire.
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .exec_async(&mut admin)
        .await
        .expect("FUNCTION FLUSH");
    let permit = a.semaphore(&name, 1).acquire().await.expect("a permit after the flush");
    permit.release().await.expect("release the permit");
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_whose_acl_refuses_functions_gets_plain_scripts() {
    let _serial = SERIAL.lock().await;
    common::init_logs();
    let mut admin = common::admin(&common::redis_url()).await;
    let url = common::url_without_functions("").await;
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let evalshas = calls(&mut admin, "evalsha").await;
    let name = unique_name("functions_refused");
    let held = a.lock(&name).acquire().await.expect("acquire without functions");
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).timeout(Duration::from_secs(20)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = held.fencing_token();
    held.release().await.expect("release");
    let next = waiter.await.expect("join").expect("handed over");
    assert!(next.fencing_token() > token);
    next.release().await.expect("release");
    let evalshas = calls(&mut admin, "evalsha").await - evalshas;
    assert!(
        evalshas >= 4,
        "{evalshas} EVALSHAs for an acquire, a wait, two releases"
    );
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
}
