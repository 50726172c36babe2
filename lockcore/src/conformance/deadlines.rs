//! Every call ends in time when the server goes away or stops answering: run by each backend's
//! `tests/deadlines.rs` against its real server, reached through a [`Proxy`] that cuts or freezes
//! the traffic.
//!
//! - **Server down** (the proxy closes every connection), or **silent while a waiter waits**: a
//!   waiter whose timeout runs out says the backend did not answer (`Unavailable`), not that the
//!   lock was busy, at its deadline.
//! - **Server silent** (connections stay open, nothing is answered — a frozen server, a proxy
//!   that stops forwarding): `try_acquire`, `acquire` with a timeout, `inspect` and `release`
//!   end within their bound (the caller's timeout, else the backend's request timeout) with
//!   `Unavailable`, and a held lock's `lost()` fires within its TTL, before the server lets a
//!   waiter on another connection in (a mutex, a one-permit semaphore, a writer and a leader).
//! - **A release that got no answer** (cut off, or failed with `Unavailable`, or a dropped
//!   guard's), its request lost with the connection: the lock is free within about the request
//!   timeout once the server answers again, not after its TTL.
//!
//! Each bound is checked with a margin of [`MARGIN`]: generous against a loaded machine, far
//! below what a call that waits for the client library's own reconnect would take (tens of
//! seconds to minutes).

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::harness::{unique_name, within, Builder};
use super::proxy::{Mode, Proxy};
use crate::{LockError, LockGuard, Locker};

/// How much later than its bound a call may end.
pub const MARGIN: Duration = Duration::from_secs(2);

/// The lease TTL the held lock asks for (session backends take theirs from the URL instead:
/// `connect` should ask for about this much).
pub const TTL: Duration = Duration::from_secs(2);

/// Runs `call`, checks it ended within `bound` + [`MARGIN`] with [`LockError::Unavailable`].
async fn ends_unavailable<T: std::fmt::Debug>(
    what: &str,
    bound: Duration,
    call: impl Future<Output = Result<T, LockError>>,
) {
    let start = Instant::now();
    let result = within(bound + MARGIN * 10, what, call).await;
    let took = start.elapsed();
    assert!(
        matches!(result, Err(LockError::Unavailable { .. })),
        "{what}: expected Unavailable, got {result:?} after {took:?}"
    );
    assert!(
        took <= bound + MARGIN,
        "{what}: took {took:?}, more than its bound of {bound:?} (+{MARGIN:?})"
    );
}

/// A waiter queued on the held lock `name` through a proxy that turns to `fault` half a second
/// into its 3 s wait: it must end with [`LockError::Unavailable`] at its deadline. `what` says
/// what the server did, for the messages.
async fn waiter_ends_unavailable<F, Fut>(upstream: &str, connect: &F, name: &str, fault: Mode, what: &str)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Locker>,
{
    let proxy = Proxy::start(upstream).await;
    let waiter = connect(proxy.addr()).await;
    let timeout = Duration::from_secs(3);
    let waiting = tokio::spawn({
        let name = name.to_owned();
        async move {
            let start = Instant::now();
            let result = waiter.lock(&name).timeout(timeout).acquire().await.map(drop);
            (result, start.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set(fault);
    let (result, took) = waiting.await.expect("waiter task");
    assert!(
        matches!(result, Err(LockError::Unavailable { .. })),
        "a waiter whose server {what} must say so at its deadline, not report a busy lock: {result:?}"
    );
    assert!(
        took >= timeout && took <= timeout + MARGIN,
        "the waiter whose server {what} ended after {took:?}, not at its deadline of {timeout:?}"
    );
}

/// The whole check. `upstream` is the server's `host:port`; `connect(addr)` returns a new
/// [`Locker`] for the server at `addr`, with `request_timeout` as its request timeout (and a
/// session TTL of about [`TTL`] on session backends).
pub async fn calls_end_in_time<F, Fut>(upstream: &str, request_timeout: Duration, connect: F)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Locker>,
{
    let direct = connect(upstream.to_owned()).await;
    let busy_name = unique_name("deadline_busy");
    let busy = direct.lock(&busy_name).acquire().await.expect("acquire");

    // Server down, then silent, while a waiter waits: its deadline says "unavailable", not
    // "busy". Silent, every request the waiter made was answered: it fell silent while the
    // waiter only listened.
    waiter_ends_unavailable(upstream, &connect, &busy_name, Mode::Cut, "went down").await;
    waiter_ends_unavailable(upstream, &connect, &busy_name, Mode::FREEZE, "fell silent").await;

    // Server silent.
    let proxy = Proxy::start(upstream).await;
    let locker = connect(proxy.addr()).await;
    let held = locker
        .lock(unique_name("deadline_held"))
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    let free = unique_name("deadline_free");
    let races = told_before_the_next_is_granted(&locker, &direct, &held).await;
    proxy.set(Mode::FREEZE);
    let frozen_at = Instant::now();
    ends_unavailable(
        "try_acquire",
        request_timeout,
        locker.lock(&free).ttl(TTL).try_acquire(),
    )
    .await;
    let short = Duration::from_secs(1);
    ends_unavailable(
        "try_acquire with a 1s timeout",
        short,
        locker.lock(&free).ttl(TTL).timeout(short).try_acquire(),
    )
    .await;
    ends_unavailable(
        "acquire of a free lock with a 2s timeout",
        TTL,
        locker.lock(&free).ttl(TTL).timeout(TTL).acquire(),
    )
    .await;
    ends_unavailable("inspect", request_timeout, locker.inspect(&free)).await;
    let ttl = held.ttl();
    within(
        ttl + MARGIN * 5,
        "lost() of a lock held behind the silent server",
        held.lost(),
    )
    .await;
    assert!(
        frozen_at.elapsed() <= ttl.max(request_timeout * 4) + MARGIN * 2,
        "lost() fired {:?} after the server fell silent, TTL {ttl:?}",
        frozen_at.elapsed()
    );
    for race in races {
        race.told_first().await;
    }
    let start = Instant::now();
    let released = within(request_timeout + MARGIN * 10, "release", held.release()).await;
    assert!(released.is_err(), "a lost lock released fine behind a silent server");
    assert!(
        start.elapsed() <= request_timeout + MARGIN,
        "release took {:?}",
        start.elapsed()
    );

    // Healed: the same locker works again.
    proxy.set(Mode::Forward);
    let again = within(
        Duration::from_secs(60),
        "acquire after the server answers again",
        async {
            loop {
                match locker
                    .lock(&free)
                    .ttl(TTL)
                    .timeout(Duration::from_secs(5))
                    .acquire()
                    .await
                {
                    Ok(guard) => return guard,
                    Err(e) => {
                        tracing::debug!(error = %e, "not yet");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        },
    )
    .await;
    again.release().await.expect("release");
    busy.release().await.expect("release");

    // A release cut off while its request is lost with its connection still releases.
    for (other_held, level) in [(true, Level::Guard), (true, Level::Backend), (false, Level::Guard)] {
        release_cut_off_and_lost(upstream, request_timeout, &connect, &direct, other_held, level).await;
    }
    // So does a release that got no answer: an explicit one, a dropped guard's, the watchdog's.
    for ended in [Ended::Released, Ended::Dropped, Ended::MaxHold] {
        failed_release_frees_once_answered(upstream, request_timeout, &connect, &direct, ended).await;
    }
}

/// One holder behind the silent server and the waiter for its lock on a direct connection: when
/// each was told (the holder's `lost()`, the waiter's grant).
struct Race {
    what: &'static str,
    lost_at: JoinHandle<Instant>,
    granted_at: JoinHandle<Instant>,
}

impl Race {
    /// The holder's `lost()` and the waiter's grant (whose output is dropped once timed), each
    /// timed by a task of its own.
    fn start<T: Send + 'static>(
        what: &'static str,
        lost: impl Future<Output = crate::LostReason> + Send + 'static,
        granted: impl Future<Output = crate::Result<T>> + Send + 'static,
    ) -> Race {
        Race {
            what,
            lost_at: tokio::spawn(async move {
                lost.await;
                Instant::now()
            }),
            granted_at: tokio::spawn(async move {
                let granted = granted.await.expect("the waiter on the direct connection");
                let at = Instant::now();
                drop(granted); // the holder behind the silent server too: tried again later
                at
            }),
        }
    }

    /// Checks that the holder was told before the waiter was granted.
    async fn told_first(self) {
        let what = self.what;
        let lost_at = within(TTL * 5 + MARGIN * 5, "lost() behind the silent server", self.lost_at).await;
        let granted_at = within(TTL * 5 + MARGIN * 5, "the waiter's grant", self.granted_at).await;
        let (lost_at, granted_at) = (lost_at.expect("lost task"), granted_at.expect("grant task"));
        assert!(
            lost_at <= granted_at,
            "{what}: the waiter was granted {:?} before the holder behind the silent server was told",
            lost_at - granted_at
        );
    }
}

/// A holder of each kind (the mutex `held`, a one-permit semaphore, a writer, a leader) on
/// `locker`, whose server is about to fall silent, and a waiter for each on `direct`: once the
/// server expires the holders, the waiters are granted, and each holder must have been told by
/// then (its `lost()`), as every kind promises.
async fn told_before_the_next_is_granted(locker: &Locker, direct: &Locker, held: &LockGuard) -> Vec<Race> {
    let mut races = Vec::new();
    let wait = Duration::from_secs(60);
    let waiter = direct.lock(held.name()).ttl(TTL).timeout(wait);
    races.push(Race::start("a mutex", held.lost(), waiter.acquire()));
    let kinds: [(&'static str, Builder); 2] = [
        ("a one-permit semaphore", |l, n| l.semaphore(n, 1)),
        ("a writer", |l, n| l.rwlock(n).write()),
    ];
    for (what, builder) in kinds {
        let name = unique_name("deadline_kind");
        let guard = builder(locker, &name).ttl(TTL).acquire().await.expect("acquire");
        let waiter = builder(direct, &name).ttl(TTL).timeout(wait);
        races.push(Race::start(what, guard.lost(), async move {
            Ok((waiter.acquire().await?, guard))
        }));
    }
    let name = unique_name("deadline_leader");
    let leader = (locker.election(&name).campaign("frozen").ttl(TTL).acquire().await).expect("campaign");
    let next = direct.election(&name).campaign("next").ttl(TTL).timeout(wait);
    races.push(Race::start("a leader", leader.lost(), async move {
        Ok((next.acquire().await?, leader))
    }));
    races
}

/// The TTL of the lock whose release fails in [`failed_release_frees_once_answered`]: long beside
/// the request timeout, so that a lock freed only by its TTL shows. (At most a Redis test
/// server's `restart_delay`; session backends use their session's TTL instead.)
const LONG_TTL: Duration = Duration::from_secs(12);

/// How the holder ends its lease in [`failed_release_frees_once_answered`].
#[derive(Clone, Copy, Debug)]
enum Ended {
    /// `release()`, which answers `Unavailable`.
    Released,
    /// The guard is dropped (released in the background).
    Dropped,
    /// The watchdog ends it at `max_hold` (and releases it in the background).
    MaxHold,
}

/// A release that got no answer behind a silent server (an explicit `release()`, a dropped
/// guard's, or the watchdog's at `max_hold`), its request then lost with the connection, is
/// tried again: once the server answers again, `direct` gets the lock within about the request
/// timeout, not after the rest of the lock's TTL.
async fn failed_release_frees_once_answered<F, Fut>(
    upstream: &str,
    request_timeout: Duration,
    connect: &F,
    direct: &Locker,
    ended: Ended,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Locker>,
{
    let proxy = Proxy::start(upstream).await;
    let locker = connect(proxy.addr()).await;
    let name = unique_name("deadline_release_failed");
    let max_hold = Duration::from_secs(1);
    let mut held = locker.lock(&name).ttl(LONG_TTL);
    if let Ended::MaxHold = ended {
        held = held.max_hold(max_hold);
    }
    let guard = held.acquire().await.expect("acquire");
    proxy.set(Mode::FREEZE);
    // Long enough for a background release's first try to fail.
    let first_try_failed = request_timeout + Duration::from_millis(500);
    let _kept = match ended {
        Ended::Released => {
            let released = within(
                request_timeout + MARGIN,
                "a release behind a silent server",
                guard.release(),
            )
            .await;
            assert!(
                matches!(released, Err(LockError::Unavailable { .. })),
                "a release behind a silent server: {released:?}"
            );
            None
        }
        Ended::Dropped => {
            drop(guard);
            tokio::time::sleep(first_try_failed).await;
            None
        }
        Ended::MaxHold => {
            tokio::time::sleep(max_hold + first_try_failed).await;
            assert!(!guard.is_held(), "max_hold passed: the guard must say it is over");
            Some(guard) // dropped at the end: its own release finds nothing
        }
    };
    proxy.set(Mode::Cut); // what was sent is lost with the connection
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Mode::Forward);
    let resumed = Instant::now();
    let what = format!("the lock after a release that got no answer ({ended:?})");
    let taken = within(LONG_TTL * 2, &what, direct.lock(&name).ttl(TTL).acquire())
        .await
        .expect("acquire");
    let took = resumed.elapsed();
    taken.release().await.expect("release");
    assert!(
        took <= request_timeout + MARGIN,
        "{what}: free {took:?} after the server answered again, TTL {LONG_TTL:?}: the release was not tried again"
    );
}

/// Where [`release_cut_off_and_lost`] cuts the release off.
#[derive(Clone, Copy, Debug)]
enum Level {
    /// `LockGuard::release()` under a 1 ms timeout.
    Guard,
    /// The backend's `release` of an abandoned lease, dropped after its first poll (the guard
    /// finishes a dropped release in a task of its own, so this is a release cut off by its
    /// request timeout).
    Backend,
}

/// A release cut off mid-flight while its connection is frozen, whose request is then lost with
/// the connection (cut, then reconnected), still releases: `direct` gets the lock within the
/// request timeout after the traffic resumes — not after a TTL, and not never, which is what
/// happens when a backend forgets the lock before its delete is sent and the locks still held on
/// the connection (`other_held`) keep its session alive.
async fn release_cut_off_and_lost<F, Fut>(
    upstream: &str,
    request_timeout: Duration,
    connect: &F,
    direct: &Locker,
    other_held: bool,
    level: Level,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Locker>,
{
    let proxy = Proxy::start(upstream).await;
    let locker = connect(proxy.addr()).await;
    let other = match other_held {
        true => Some(
            locker
                .lock(unique_name("deadline_other"))
                .ttl(TTL)
                .acquire()
                .await
                .expect("acquire"),
        ),
        false => None,
    };
    let name = unique_name("deadline_release_cut");
    let guard = locker.lock(&name).ttl(TTL).acquire().await.expect("acquire");
    proxy.set(Mode::FREEZE);
    match level {
        Level::Guard => {
            let _ = tokio::time::timeout(Duration::from_millis(1), guard.release()).await;
        }
        Level::Backend => {
            let lease = guard.abandon();
            let backend = locker.backend().clone();
            let mut release = backend.release(&lease);
            super::lifecycle::poll_once(release.as_mut()).await;
            drop(release); // cut off after its first poll
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Mode::Cut); // what was sent is lost with the connection
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Mode::Forward);
    let resumed = Instant::now();
    let what = format!("the lock after a release cut off and lost ({level:?} level, other lock held: {other_held})");
    let taken = within(Duration::from_secs(60), &what, direct.lock(&name).ttl(TTL).acquire())
        .await
        .expect("acquire");
    let took = resumed.elapsed();
    taken.release().await.expect("release");
    if let Some(other) = other {
        let _ = other.release().await;
    }
    assert!(
        took <= request_timeout + MARGIN,
        "{what}: freed {took:?} after the traffic resumed"
    );
}
