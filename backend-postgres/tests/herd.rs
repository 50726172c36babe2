//! No thundering herd: with 30 waiters queued (each its own locker, as separate processes would
//! be), a release and the hand-over to the next waiter cost a constant number of transactions,
//! whatever the number of waiters. Counted with the server's transaction ids (every step writes,
//! so it takes one); this file is a test binary of its own so no other test of this crate runs
//! beside it.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;
use tokio::sync::{mpsc, watch};

const WAITERS: usize = 30;

/// The server's next transaction id (this read takes one itself).
async fn xid(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one("SELECT txid_current()", &[])
        .await
        .expect("txid_current")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_with_30_waiters_costs_constant_transactions() {
    // Heartbeats every 20 s: none falls into the measured window.
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=60s", harness.url);
    let (admin, connection) = tokio_postgres::connect(&common::server_url(), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(connection);
    let name = unique_name("herd");
    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };

    let holder = connect().await.lock(&name).acquire().await.expect("acquire");
    let (go_tx, go_rx) = watch::channel(0usize);
    let go_tx = Arc::new(go_tx);
    let (got_tx, mut got_rx) = mpsc::unbounded_channel();
    let observer = connect().await;
    for i in 0..WAITERS {
        let locker = connect().await;
        let (lock, mut go, got) = (name.clone(), go_rx.clone(), got_tx.clone());
        tokio::spawn(async move {
            let guard = locker.lock(&lock).acquire().await.expect("acquire");
            got.send(i).expect("report");
            let _ = go.wait_for(|released| *released > i).await; // hold until told
            guard.release().await.expect("release");
        });
        // Queued one by one, so that the FIFO order is known.
        while observer.inspect(&name).await.unwrap().waiters < i + 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // Every waiter is asleep now: let stray steps settle.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = xid(&admin).await;
    holder.release().await.expect("release");
    let first = tokio::time::timeout(Duration::from_secs(10), got_rx.recv()).await;
    assert_eq!(first.expect("no hand-over within 10 s"), Some(0), "FIFO");
    tokio::time::sleep(Duration::from_millis(300)).await; // a herd would show up here
    let one = xid(&admin).await - before - 1;

    // Four more hand-overs, waiter to waiter.
    let before = xid(&admin).await;
    for i in 0..4 {
        go_tx.send_replace(i + 1);
        let next = tokio::time::timeout(Duration::from_secs(10), got_rx.recv()).await;
        assert_eq!(next.expect("no hand-over within 10 s"), Some(i + 1), "FIFO");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let four = xid(&admin).await - before - 1;
    eprintln!("transactions: one hand-over {one}, four hand-overs {four}");
    // A release: one transaction, which grants the next waiter and tells it its fencing token;
    // the new holder, which joined moments ago, holds without a request of its own. A herd
    // would cost one per waiter (30); a confirmation by the new holder one more per hand-over
    // (before the grant named its token: 2 and 8).
    assert!(one <= 2, "one hand-over with {WAITERS} waiters took {one} transactions");
    assert!(
        four <= 4 + 1,
        "four hand-overs with {WAITERS} waiters took {four} transactions"
    );
    go_tx.send_replace(WAITERS);
}

/// A mutex hand-over is one statement (`alone.sql`'s `leave_exclusive`), whose NOTIFY must say
/// what the full step's would (`wake::payload`): the new holder granted with its fencing token
/// (the one its guard shows), the next waiter first in line with the new holder's lease in
/// milliseconds, then the lock's segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_handover_notifies_the_new_holder_and_the_next_waiter() {
    use futures_util::StreamExt;
    use locksmith_core::driver::LockName;
    use locksmith_core::Family;

    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=30s", harness.url);
    let schema = harness.schema.clone();
    let (listener, mut connection) = tokio_postgres::connect(&common::server_url(), tokio_postgres::NoTls)
        .await
        .expect("listening connection");
    let (heard_tx, mut heard) = mpsc::unbounded_channel();
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = heard_tx.send(n.payload().to_owned());
            }
        }
    });
    listener
        .batch_execute(&format!("LISTEN locksmith_{schema}"))
        .await
        .unwrap();

    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let name = unique_name("payload");
    let lock_name = LockName::new(&name).unwrap();
    let holder = connect().await.lock(&name).acquire().await.unwrap();
    let mut waiters = Vec::new();
    for i in 1..=2 {
        let locker = connect().await;
        let lock = name.clone();
        waiters.push(tokio::spawn(async move {
            locker.lock(&lock).acquire().await.map(|g| (locker, g))
        }));
        while harness.look.entries(Family::Mutex, &lock_name).await.unwrap().len() < i + 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let ids: Vec<String> = harness
        .look
        .entries(Family::Mutex, &lock_name)
        .await
        .unwrap()
        .iter()
        .map(|e| e.rsplit(':').next().unwrap().to_owned())
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    while heard.try_recv().is_ok() {} // the joins' notifications

    holder.release().await.unwrap();
    let payload = tokio::time::timeout(Duration::from_secs(5), heard.recv())
        .await
        .expect("no notification")
        .unwrap();
    let (directives, segment) = payload.split_once('|').expect(&payload);
    assert_eq!(segment, Family::Mutex.segment(&lock_name), "{payload}");
    let (granted, first) = directives.split_once(',').expect(&payload);
    let (granted_id, token) = granted.split_once(':').expect(&payload);
    assert_eq!(granted_id, format!("h{}", ids[1]), "{payload}");
    let token: u64 = token.parse().expect(&payload);
    let (first_id, ms) = first.split_once(':').expect(&payload);
    assert_eq!(first_id, format!("f{}", ids[2]), "{payload}");
    let ms: u64 = ms.parse().expect(&payload);
    assert!((29_000..=30_000).contains(&ms), "{payload}");

    let mut lockers = Vec::new();
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (locker, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("not handed over")
            .unwrap()
            .unwrap();
        if i == 0 {
            assert_eq!(guard.fencing_token(), token, "{payload}");
        }
        guard.release().await.unwrap();
        lockers.push(locker);
    }
    for locker in lockers {
        locker.shutdown().await.unwrap();
    }
}
