//! Nothing piles up: the rows of locks nobody holds or waits for, idle for the given time, and
//! the owner rows of lockers long dead are removed by `Locker::prune` (and by every locker's own
//! passes), never a row in use, and a lock used again goes on with tokens above its earlier ones
//! (the high-water mark of pruned tokens).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{query_as_owner, PgHarness};
use locksmith_core::conformance::Harness;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, Locker};

/// The rows of `schema`'s `locks` (the high-water mark's aside) whose segment starts with
/// `prefix`.
async fn lock_rows(schema: &str, prefix: &str) -> usize {
    let rows = query_as_owner(&format!(
        "SELECT count(*) FROM \"{schema}\".locks WHERE segment LIKE '{prefix}%' AND segment <> '~pruned'"
    ))
    .await;
    rows[0].parse().unwrap()
}

/// The high-water mark of pruned tokens in `schema`.
async fn mark(schema: &str) -> u64 {
    let rows = query_as_owner(&format!(
        "SELECT token FROM \"{schema}\".locks WHERE segment = '~pruned'"
    ))
    .await;
    rows[0].parse().unwrap()
}

/// After 200 names are used once (mutexes kept in their rows, semaphores through the full step),
/// a prune with no idle time removes every row of them; a dry run before only counts them. A
/// name used again hands out a token above every earlier one of it, and the high-water mark is
/// the largest token removed.
#[tokio::test]
async fn a_prune_leaves_no_row_of_200_names_used_once_and_tokens_go_on() {
    let h = PgHarness::plain().await;
    let locker = h.locker().await;
    let mut last = HashMap::new();
    for i in 0..200 {
        let name = format!("once-{i:03}");
        let guard = match i % 2 {
            0 => locker.lock(&name).acquire().await.unwrap(),
            _ => locker.semaphore(&name, 2).acquire().await.unwrap(),
        };
        last.insert(name, guard.fencing_token());
        guard.release().await.unwrap();
    }
    assert_eq!(lock_rows(&h.schema, "once-").await, 200);

    let dry = locker.prune(Duration::ZERO, true).await.unwrap();
    assert!(dry.dry_run && dry.locks >= 200, "{dry:?}");
    assert_eq!(lock_rows(&h.schema, "once-").await, 200, "a dry run removed rows");
    // Idle for an hour: none of them is.
    let hour = locker.prune(Duration::from_secs(3600), false).await.unwrap();
    assert_eq!(hour.locks, 0, "{hour:?}");

    let report = locker.prune(Duration::ZERO, false).await.unwrap();
    assert!(report.locks >= 200 && !report.dry_run, "{report:?}");
    assert_eq!(lock_rows(&h.schema, "once-").await, 0, "rows left after the prune");
    let highest = *last.values().max().unwrap();
    assert!(mark(&h.schema).await >= highest, "the mark is below a pruned token");

    // Used again, as a mutex kept in its row and as a semaphore through the full step.
    for (i, name) in ["once-000", "once-001"].into_iter().enumerate() {
        let guard = match i {
            0 => locker.lock(name).acquire().await.unwrap(),
            _ => locker.semaphore(name, 2).acquire().await.unwrap(),
        };
        assert!(
            guard.fencing_token() > last[name],
            "{name}: token {} after {}",
            guard.fencing_token(),
            last[name]
        );
        guard.release().await.unwrap();
    }
    locker.shutdown().await.unwrap();
}

/// The high-water mark is what a lock's new row starts from, not the server's clock: with the
/// mark an hour ahead of the clock (as after the clock stepped back by an hour once a prune had
/// removed rows), a pruned name's next token is above the mark, on the one-statement grant and on
/// the full step alike.
#[tokio::test]
async fn a_lock_pruned_starts_above_the_mark_not_the_clock() {
    let h = PgHarness::plain().await;
    let locker = h.locker().await;
    for name in ["mark-a", "mark-b"] {
        locker.lock(name).acquire().await.unwrap().release().await.unwrap();
    }
    locker.prune(Duration::ZERO, false).await.unwrap();
    assert_eq!(lock_rows(&h.schema, "mark-").await, 0);
    let ahead = query_as_owner(&format!(
        "UPDATE \"{}\".locks SET token = floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
         + 3600000000 WHERE segment = '~pruned' RETURNING token",
        h.schema
    ))
    .await[0]
        .parse::<u64>()
        .unwrap();
    let in_row = locker.lock("mark-a").acquire().await.unwrap();
    assert!(in_row.fencing_token() > ahead, "{} <= {ahead}", in_row.fencing_token());
    in_row.release().await.unwrap();
    let stepped = locker.semaphore("mark-b", 3).acquire().await.unwrap();
    assert!(
        stepped.fencing_token() > ahead,
        "{} <= {ahead}",
        stepped.fencing_token()
    );
    stepped.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A lock held (kept in its row) and one waited for (entries) keep their rows through a prune
/// with no idle time; the holder's renewals go on and it releases; the waiter is granted.
#[tokio::test]
async fn a_prune_never_touches_a_held_or_waited_lock() {
    let h = PgHarness::plain().await;
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = Duration::from_secs(2);
    let held = a.lock("busy-held").ttl(ttl).acquire().await.unwrap();
    let queued = a.lock("busy-queued").ttl(ttl).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("busy-queued").ttl(ttl).acquire().await }
    });
    while h.residue(&LockName::new("busy-queued").unwrap()).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..15 {
        b.prune(Duration::ZERO, false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await; // over two TTLs in all: renewals ran
    }
    assert_eq!(lock_rows(&h.schema, "busy-").await, 2);
    assert!(held.lost_reason().is_none() && queued.lost_reason().is_none());
    let token = queued.fencing_token();
    queued.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    held.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Lockers take and release a few names over and over, some holding across their renewals, some
/// waiting, while another prunes with no idle time in a loop: each name's tokens, in the order of
/// its grants, keep increasing, no two hold one name at once, and no guard is lost.
#[tokio::test]
async fn prunes_in_a_loop_beside_lockers_lose_nothing() {
    let h = PgHarness::plain().await;
    let names: Vec<String> = (0..6).map(|i| format!("churn-{i}")).collect();
    let tokens: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    // A name's mutex and its semaphore are two locks: each has its own tokens.
    let locks: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("{n}/mutex"), format!("{n}/sem")])
        .collect();
    let busy: Arc<HashMap<String, AtomicBool>> =
        Arc::new(locks.iter().map(|n| (n.clone(), AtomicBool::new(false))).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let pruner = {
        let (locker, stop) = (h.locker().await, stop.clone());
        tokio::spawn(async move {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                removed += locker.prune(Duration::ZERO, false).await.unwrap().locks;
            }
            locker.shutdown().await.unwrap();
            removed
        })
    };
    let mut workers = Vec::new();
    for w in 0..4 {
        let locker = h.locker().await;
        let (names, tokens, busy) = (names.clone(), tokens.clone(), busy.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..40 {
                let name = &names[(w * 7 + round * 5) % names.len()];
                let (builder, lock) = match round % 3 {
                    0 => (locker.semaphore(name, 1), format!("{name}/sem")),
                    _ => (locker.lock(name), format!("{name}/mutex")),
                };
                let guard = builder.ttl(Duration::from_secs(3)).acquire().await.unwrap();
                assert!(!busy[&lock].swap(true, Ordering::SeqCst), "{lock}: two holders");
                tokens
                    .lock()
                    .unwrap()
                    .entry(lock.clone())
                    .or_default()
                    .push(guard.fencing_token());
                // Some holds outlast a renewal interval (a third of the TTL): they live by their renewals.
                let hold = if round % 8 == 0 { 1_500 } else { 5 };
                tokio::time::sleep(Duration::from_millis(hold)).await;
                assert!(
                    guard.lost_reason().is_none(),
                    "{lock}: lost while held: {:?}",
                    guard.lost_reason()
                );
                busy[&lock].store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            locker.shutdown().await.unwrap();
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let removed = pruner.await.unwrap();
    assert!(removed > 0, "the prunes removed nothing: the test proves nothing");
    for (name, tokens) in tokens.lock().unwrap().iter() {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{name}: tokens went back: {tokens:?}"
        );
    }
}

/// Owner rows of lockers dead for longer than the idle time go, with a lock whose only entry
/// is such a locker's waiter; a live locker's owner row and a recent one stay.
#[tokio::test]
async fn dead_lockers_owner_rows_go_with_their_dead_waiters() {
    let h = PgHarness::plain().await;
    let locker = h.locker().await;
    let s = &h.schema;
    let old = "floor(extract(epoch FROM clock_timestamp() - interval '2 hours') * 1000000)::bigint";
    query_as_owner(&format!(
        "INSERT INTO \"{s}\".owners VALUES ('dead-alone', clock_timestamp() - interval '2 hours', 1, 'h'), \
         ('dead-waiting', clock_timestamp() - interval '2 hours', 2, 'h'), \
         ('recent', clock_timestamp() - interval '1 minute', 3, 'h'), \
         ('alive', clock_timestamp() + interval '1 hour', 4, 'h'); \
         INSERT INTO \"{s}\".locks (segment, token, queued) VALUES ('orphan', {old}, true); \
         INSERT INTO \"{s}\".entries (id, segment, owner, role, ttl_ms, pid, host) \
         VALUES ('w1', 'orphan', 'dead-waiting', 'exclusive', 1000, 2, 'h')"
    ))
    .await;
    let dry = locker.prune(Duration::from_secs(3600), true).await.unwrap();
    assert_eq!((dry.locks, dry.owners), (1, 1), "{dry:?}"); // dead-waiting only once its entry went
    let report = locker.prune(Duration::from_secs(3600), false).await.unwrap();
    assert_eq!((report.locks, report.owners), (1, 2), "{report:?}");
    let owners = query_as_owner(&format!("SELECT id FROM \"{s}\".owners ORDER BY id")).await;
    assert!(
        owners.contains(&"alive".to_owned()) && owners.contains(&"recent".to_owned()),
        "{owners:?}"
    );
    assert!(!owners.iter().any(|o| o.starts_with("dead")), "{owners:?}");
    assert_eq!(lock_rows(s, "orphan").await, 0);
    locker.shutdown().await.unwrap();
}

/// Every locker prunes by itself now and then (here: every 200 ms, idle 0, through the hidden
/// knob the tests have): rows of names used once go without anyone calling `prune`.
#[tokio::test]
async fn a_locker_prunes_by_itself() {
    let h = PgHarness::plain().await;
    let backend = locksmith_postgres::PgBackend::connect(&BackendUrl::parse(&h.url).unwrap())
        .await
        .unwrap();
    backend.keep_pruning(Duration::from_millis(200), Duration::ZERO);
    let locker = Locker::new(backend);
    for i in 0..20 {
        locker
            .lock(format!("auto-{i}"))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lock_rows(&h.schema, "auto-").await > 0 {
        assert!(tokio::time::Instant::now() < deadline, "rows left after 10 s of passes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(h
        .look
        .entries(Family::Mutex, &LockName::new("auto-0").unwrap())
        .await
        .unwrap()
        .is_empty());
    locker.shutdown().await.unwrap();
}

/// Bug: a locker's own passes began 5 to 10 minutes after it connected, so the rows of names used
/// only by short-lived processes (every `locksmith run`) stayed until someone ran `locksmith
/// prune`. A locker that connects when the schema's last automatic pass began over ten minutes
/// ago runs the next at once, and records when it began (in the high-water mark's row) so that
/// the lockers after it do not.
#[tokio::test]
async fn a_locker_connecting_when_a_pass_is_due_prunes_at_once() {
    let h = PgHarness::plain().await;
    let s = &h.schema;
    let locker = h.locker().await;
    for i in 0..3 {
        let guard = locker.lock(format!("due-{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    locker.shutdown().await.unwrap();
    assert_eq!(lock_rows(s, "due-").await, 3);
    // Their last tokens handed out two hours ago, and the schema's last pass eleven minutes ago.
    query_as_owner(&format!(
        "UPDATE \"{s}\".locks SET token = token - 7200000000 WHERE segment LIKE 'due-%'; \
         UPDATE \"{s}\".locks SET holder_expires = clock_timestamp() - interval '11 minutes' \
         WHERE segment = '~pruned'"
    ))
    .await;
    let again = h.locker().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lock_rows(s, "due-").await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "rows idle for two hours left 10 s after a locker connected when a pass was due"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let began = query_as_owner(&format!(
        "SELECT holder_expires > clock_timestamp() - interval '1 minute' FROM \"{s}\".locks WHERE segment = '~pruned'"
    ))
    .await;
    assert_eq!(began, ["t"], "the pass did not record when it began");
    again.shutdown().await.unwrap();
}
