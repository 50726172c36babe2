//! The session: one etcd lease per `Locker`, to which every key of that locker is attached.
//!
//! - It is granted at connect (which is how `connect` checks that the cluster answers) with the
//!   TTL of the URL, and re-granted lazily if it is found gone.
//! - It is kept alive through ONE keep-alive stream: by the watchdog's `renew_many` while locks
//!   are held (one keep-alive per tick, whatever the number of locks), and by a small keeper task
//!   while some `acquire` is waiting in the queue (a waiter's key must outlive its wait).
//! - When a keep-alive answers TTL 0, the lease is gone: every held lock fires `lost()`, waiters
//!   re-queue with a new lease, and the next request grants one.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper};
use locksmith_core::driver::LostSignal;
use locksmith_core::{LockError, Result};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Config;
use crate::conn::held::{Held, HeldRegistry};
use crate::conn::plain;
use crate::conn::sweep::Sweep;
use crate::conn::{with_tls, Conn, Stats};
use crate::error::{from_etcd, is_lease_not_found, request, timed};
use crate::protocol::slots::{Slot, Slots};
use crate::wake::watch::WatchHub;

/// The lease a request is made under.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseRef {
    pub id: i64,
    pub ttl: Duration,
    /// Bumped every time a lease is found gone; a waiter whose generation is stale has lost its key.
    pub generation: u64,
}

struct LeaseState {
    id: Option<i64>,
    ttl: Duration,
    /// When the last request that refreshed the lease on the server (grant or keep-alive) was sent.
    refreshed_at: Instant,
    generation: u64,
}

struct KeepAlive {
    id: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

/// One connection to etcd with its lease.
pub(crate) struct Session {
    pub client: Client,
    pub conn: Conn,
    pub cfg: Config,
    pub held: Arc<HeldRegistry>,
    pub hub: WatchHub,
    pub slots: Slots,
    pub sweep: Sweep,
    state: Mutex<LeaseState>,
    grant_lock: tokio::sync::Mutex<()>,
    keep_alive: tokio::sync::Mutex<Option<KeepAlive>>,
    generation: watch::Sender<u64>,
    waiters: watch::Sender<usize>,
    /// Set when the backend is dropped: what the election observers end on.
    closed: watch::Sender<bool>,
}

/// Counts one waiting `acquire` while it lives (the keeper task runs while any does).
pub(crate) struct Waiting(Arc<Session>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiters.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Session {
    /// Connects and grants the first lease, all within the connect timeout.
    pub async fn start(cfg: Config) -> Result<Arc<Session>> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(cfg.connect_timeout)
            // HTTP/2 pings find a dead connection under a long-lived stream. etcd refuses pings
            // more often than every 5 s, and pings without a stream.
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(false)
            // A member cut off from the leader refuses requests instead of serving stale state.
            .with_require_leader(true);
        if let Some((user, password)) = &cfg.credentials {
            options = options.with_user(user, password);
        }
        if let Some(tls) = &cfg.tls {
            options = with_tls(options, tls)?;
        }
        let where_ = cfg.endpoints.join(",");
        let deadline = Instant::now() + cfg.connect_timeout;
        // Over TLS, a failure that looks like an outage may be servers without TLS, or our
        // client certificate refused (`plain::tls_failed`).
        let what = format!("connecting to etcd at {where_}");
        let client = match timed(
            &what,
            cfg.connect_timeout,
            Client::connect(&cfg.endpoints, Some(options)),
        )
        .await
        {
            Ok(client) => client,
            Err(e) => match &cfg.tls {
                Some(files) => return Err(plain::tls_failed(&cfg.endpoints, files, &what, e).await),
                None => return Err(e),
            },
        };
        let ttl_secs = i64::try_from(cfg.session_ttl.as_secs()).unwrap_or(i64::MAX);
        let sent = Instant::now();
        let what = format!("granting a session lease at {where_}");
        let granted = request(&what, deadline.saturating_duration_since(sent), || {
            let mut lease = client.lease_client();
            async move { lease.grant(ttl_secs, None).await }
        })
        .await;
        let grant = match granted {
            Ok(grant) => grant,
            Err(e) => match &cfg.tls {
                Some(files) => return Err(plain::tls_failed(&cfg.endpoints, files, &what, e).await),
                None => return Err(e),
            },
        };
        let granted = granted_ttl(grant.ttl(), grant.error())?;
        tracing::debug!(lease = format_args!("{:x}", grant.id()), ttl = ?granted, "etcd session started");
        let held = Arc::new(HeldRegistry::default());
        let stats = Arc::new(Stats::default());
        let session = Arc::new(Session {
            hub: WatchHub::new(client.clone(), held.clone(), cfg.request_timeout, stats.clone()),
            conn: Conn {
                client: Arc::new(client.clone()),
                limit: cfg.request_timeout,
                stats,
            },
            client,
            cfg,
            held,
            slots: Slots::default(),
            sweep: Sweep::default(),
            state: Mutex::new(LeaseState {
                id: Some(grant.id()),
                ttl: granted,
                refreshed_at: sent,
                generation: 0,
            }),
            grant_lock: tokio::sync::Mutex::new(()),
            keep_alive: tokio::sync::Mutex::new(None),
            generation: watch::channel(0).0,
            waiters: watch::channel(0).0,
            closed: watch::channel(false).0,
        });
        tokio::spawn(keeper(Arc::downgrade(&session), session.waiters.subscribe()));
        Ok(session)
    }

    fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The effective TTL of the current (or last) lease.
    pub fn ttl(&self) -> Duration {
        self.state().ttl
    }

    /// The current lease id, if one is believed alive.
    pub fn lease_id(&self) -> Option<i64> {
        self.state().id
    }

    /// Whether lease `id` is still this session's lease: it has not been found gone, so a later
    /// keep-alive may refresh it, even after keep-alives failed for longer than its TTL (etcd
    /// extends every lease when a new leader takes over).
    pub fn owns_lease(&self, id: i64) -> bool {
        self.state().id == Some(id)
    }

    /// Test support: as if no keep-alive of the lease had been answered for twice its TTL (an
    /// election under way), without touching the lease on the server.
    #[cfg(test)]
    pub(crate) fn age_refresh(&self) {
        let mut s = self.state();
        let ttl = s.ttl;
        s.refreshed_at = Instant::now().checked_sub(ttl * 2).unwrap_or(s.refreshed_at);
    }

    /// Marks one `acquire` as waiting until the returned guard drops.
    pub fn waiting(self: &Arc<Self>) -> Waiting {
        self.waiters.send_modify(|n| *n += 1);
        Waiting(self.clone())
    }

    /// Resolves when the lease of `generation` is found gone.
    pub async fn lease_lost(&self, generation: u64) {
        let mut rx = self.generation.subscribe();
        if rx.wait_for(|g| *g != generation).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The lease to attach a new key to: alive and refreshed within the last half of its TTL (so
    /// a lock granted under it starts with at least half its TTL). Costs one keep-alive after an
    /// idle period, one grant after the lease was lost. While locks are held the watchdog renews
    /// every third of the TTL, so no extra keep-alive is sent and a new lock's `acquired_at` is
    /// the last renewal: it joins the batch of the locks already held.
    pub async fn current(&self) -> Result<LeaseRef> {
        for _ in 0..3 {
            let (id, ttl, refreshed_at, generation) = {
                let s = self.state();
                (s.id, s.ttl, s.refreshed_at, s.generation)
            };
            match id {
                Some(id) if Instant::now() < refreshed_at + ttl / 2 => return Ok(LeaseRef { id, ttl, generation }),
                Some(id) => {
                    if self.keep_alive(id).await? {
                        return Ok(LeaseRef { id, ttl, generation });
                    }
                }
                None => self.grant().await?,
            }
        }
        Err(LockError::Protocol(
            "etcd keeps losing the session lease right after granting it".into(),
        ))
    }

    /// Before a waiter hands out its lock: if lease `id` was not refreshed for half its TTL (the
    /// keep-alives failed during an outage), refresh it now, so that the lock does not start
    /// with a validity that is already (nearly) over. `Ok(false)`: the lease is gone.
    pub async fn refresh_if_stale(&self, id: i64) -> Result<bool> {
        let stale = {
            let s = self.state();
            if s.id != Some(id) {
                return Ok(false);
            }
            Instant::now() >= s.refreshed_at + s.ttl / 2
        };
        if stale {
            self.keep_alive(id).await
        } else {
            Ok(true)
        }
    }

    async fn grant(&self) -> Result<()> {
        let _one_at_a_time = self.grant_lock.lock().await;
        if self.state().id.is_some() {
            return Ok(());
        }
        if *self.closed.borrow() {
            return Err(LockError::Closed);
        }
        let ttl_secs = i64::try_from(self.cfg.session_ttl.as_secs()).unwrap_or(i64::MAX);
        let sent = Instant::now();
        let grant = request("granting a session lease", self.cfg.request_timeout, || {
            let mut lease = self.client.lease_client();
            async move { lease.grant(ttl_secs, None).await }
        })
        .await?;
        let granted = granted_ttl(grant.ttl(), grant.error())?;
        tracing::info!(lease = format_args!("{:x}", grant.id()), ttl = ?granted, "new etcd session lease");
        let mut s = self.state();
        s.id = Some(grant.id());
        s.ttl = granted;
        s.refreshed_at = sent;
        Ok(())
    }

    /// Sends one keep-alive for lease `id` on the session's keep-alive stream (opening it if
    /// needed). `Ok(true)`: refreshed; `Ok(false)`: the lease is gone (and its locks are lost).
    pub async fn keep_alive(&self, id: i64) -> Result<bool> {
        let mut slot = self.keep_alive.lock().await;
        self.conn.stats.keep_alives.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let limit = self.cfg.request_timeout;
        // The stream is taken out of the slot while the keep-alive is in flight and put back
        // only when its answer was read: if this future is dropped in flight (the watchdog
        // bounds `renew_many`), the stream is dropped with it, so its late answer can never be
        // read by the next keep-alive as its own.
        let current = slot.take().filter(|k| k.id == id);
        let attempt = async {
            match current {
                Some(mut k) => {
                    k.keeper.keep_alive().await?;
                    match k.stream.message().await? {
                        Some(resp) => Ok((resp.ttl() > 0, Some(k))),
                        None => Err(etcd_client::Error::LeaseKeepAliveError(
                            "the keep-alive stream ended".into(),
                        )),
                    }
                }
                None => match self.client.lease_client().keep_alive(id).await {
                    Ok((keeper, stream)) => Ok((true, Some(KeepAlive { id, keeper, stream }))),
                    Err(etcd_client::Error::LeaseKeepAliveError(e)) if e.contains("lease not found") => {
                        Ok((false, None))
                    }
                    Err(e) => Err(e),
                },
            }
        };
        let outcome = match tokio::time::timeout(limit, attempt).await {
            Ok(Ok((alive, stream))) => {
                *slot = stream.filter(|_| alive);
                Ok(alive)
            }
            Ok(Err(e)) => Err(from_etcd("keeping the session lease alive", e)),
            Err(_) => Err(LockError::Unavailable {
                message: format!("keeping the session lease alive: no answer from etcd within {limit:?}"),
                source: None,
            }),
        };
        match outcome {
            Ok(true) => {
                let mut s = self.state();
                if s.id == Some(id) && s.refreshed_at < sent {
                    s.refreshed_at = sent;
                }
                Ok(true)
            }
            Ok(false) => {
                drop(slot);
                self.lease_gone(id, "etcd answered the keep-alive with TTL 0 (expired or revoked)");
                Ok(false)
            }
            Err(e) => {
                drop(slot); // a failed stream is not reused
                Err(e)
            }
        }
    }

    /// The lease `id` is gone on the server: fire every lock attached to it, wake the waiters.
    pub fn lease_gone(&self, id: i64, why: &str) {
        {
            let mut s = self.state();
            if s.id != Some(id) {
                return;
            }
            s.id = None;
            s.generation += 1;
            self.generation.send_replace(s.generation);
        }
        tracing::warn!(lease = format_args!("{id:x}"), why, "etcd session lease lost");
        for watch_id in self.held.lease_gone(id, why) {
            self.hub.cancel(watch_id);
        }
    }

    /// Records a granted lock (the sweeper watches its key if it is still held after
    /// [`crate::conn::sweep::WATCH_DELAY`]), with the slot `take_slot` gives up (called only
    /// then). Returns when the lease was last refreshed (the lock's `acquired_at`); `None`, and
    /// nothing recorded, if the session gave the lease up meanwhile: the key must not be handed
    /// out (the caller's clean-up deletes it).
    pub fn register_held(
        &self,
        key: &str,
        lease: LeaseRef,
        create_rev: i64,
        lost: &LostSignal,
        take_slot: impl FnOnce() -> Option<Slot>,
    ) -> Option<Instant> {
        let s = self.state();
        let still_alive = s.generation == lease.generation && s.id == Some(lease.id);
        if !still_alive {
            return None;
        }
        let slot = take_slot();
        let acquired_at = s.refreshed_at;
        self.held.insert(
            key.to_owned(),
            Held {
                lease_id: lease.id,
                create_rev,
                lost: lost.clone(),
                watch_id: None,
                renewed_at: acquired_at,
                slot,
            },
        );
        drop(s);
        self.sweep.granted(key, create_rev, Instant::now());
        Some(acquired_at)
    }

    /// Resolves once the backend was dropped ([`Session::close`]).
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closed.subscribe();
        async move {
            // An error means the session itself is gone: closed too.
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }

    /// Ends the session for `Locker::shutdown`: no lease is granted any more, the lease is revoked
    /// (every key attached to it goes at once, and a lock still registered is lost), and election
    /// observers end.
    pub async fn shutdown(&self) -> Result<()> {
        self.closed.send_replace(true);
        let Some(id) = self.state().id.take() else {
            return Ok(());
        };
        for watch_id in self.held.lease_gone(id, "the locker was shut down") {
            self.hub.cancel(watch_id);
        }
        let mut client = self.client.clone();
        match timed(
            "revoking the session lease",
            self.cfg.request_timeout,
            client.lease_revoke(id),
        )
        .await
        {
            Ok(_) => tracing::debug!(lease = format_args!("{id:x}"), "etcd session ended at shutdown"),
            // Expired already (the process was paused past its TTL, etcd lost it): the session
            // has ended, which is what shutdown asks for.
            Err(e) if is_lease_not_found(&e) => {
                tracing::debug!(
                    lease = format_args!("{id:x}"),
                    "etcd session had expired before shutdown"
                )
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Revokes the lease in the background (when the backend is dropped): its keys go at once.
    /// Election observers of this backend end.
    pub fn close(&self) {
        self.closed.send_replace(true);
        let Some(id) = self.state().id.take() else { return };
        let mut client = self.client.clone();
        let limit = self.cfg.request_timeout;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                match timed("revoking the session lease", limit, client.lease_revoke(id)).await {
                    Ok(_) => tracing::debug!(lease = format_args!("{id:x}"), "etcd session closed"),
                    Err(e) => tracing::debug!(error = %e, "revoking the session lease failed; it expires by itself"),
                }
            });
        }
    }
}

fn granted_ttl(ttl: i64, error: &str) -> Result<Duration> {
    if !error.is_empty() || ttl <= 0 {
        return Err(LockError::Protocol(format!(
            "etcd refused the session lease (ttl {ttl}): {error}"
        )));
    }
    let granted = Duration::from_secs(ttl.unsigned_abs());
    // locksmith asks for at most MAX_TTL: a longer lease is not an answer to its request (and
    // one no clock can hold would panic where the guard adds it to the grant's time).
    if granted > locksmith_core::MAX_TTL {
        return Err(LockError::Protocol(format!(
            "etcd granted a session lease of {ttl} s, longer than locksmith ever asks for"
        )));
    }
    Ok(granted)
}

/// Keeps the lease alive while some `acquire` waits and nothing else refreshed it for half its
/// TTL (the watchdog's `renew_many` refreshes it every third while locks are held, so this task
/// stays quiet then and does not split the watchdog's batch).
async fn keeper(session: Weak<Session>, mut waiters: watch::Receiver<usize>) {
    loop {
        if waiters.wait_for(|n| *n > 0).await.is_err() {
            return;
        }
        let due = {
            let Some(s) = session.upgrade() else { return };
            let st = s.state();
            match st.id {
                Some(_) => st.refreshed_at + st.ttl / 2,
                None => Instant::now() + st.ttl / 10, // a waiter re-grants; look again soon
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            r = waiters.wait_for(|n| *n == 0) => if r.is_err() { return } else { continue },
        }
        let Some(s) = session.upgrade() else { return };
        let (id, ttl, refreshed_at) = {
            let st = s.state();
            (st.id, st.ttl, st.refreshed_at)
        };
        let Some(id) = id else { continue };
        if Instant::now() < refreshed_at + ttl / 2 {
            continue;
        }
        if let Err(e) = s.keep_alive(id).await {
            tracing::warn!(error = %e, "keeping the session alive for waiters failed; retrying");
            drop(s);
            tokio::time::sleep(ttl / 10).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_granted_ttl_is_checked() {
        assert_eq!(granted_ttl(10, "").unwrap(), Duration::from_secs(10));
        // Refused, negative, or beyond anything asked for (a server or proxy that answers
        // nonsense; i64::MAX seconds panicked where the guard added it to the time).
        for (ttl, error) in [(10, "no"), (0, ""), (-1, ""), (i64::MAX, ""), (86_401, "")] {
            assert!(matches!(granted_ttl(ttl, error), Err(LockError::Protocol(_))), "{ttl}");
        }
    }
}
