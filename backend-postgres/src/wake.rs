//! Wake-ups pushed by the server: the locker LISTENs on the schema's channel, on its one
//! connection (`crate::conn`; [`drive`] hands what arrives to the [`Hub`]), or behind a
//! transaction pooler on a connection of its own to the `listen=` servers ([`Hub::start`]).
//! Every step that changes a queue NOTIFYs in its transaction, so the notification arrives once
//! the change is committed; its payload ([`payload`]) names the lock's segment and **the waiters
//! that have something to do**: those the step granted, with their fencing tokens (a waiter
//! whose last step is recent holds at once; see `crate::protocol::wait`), and the first waiter
//! left in line, with the time until the earliest holder's lease runs out
//! (it takes a step then, if nothing happened before). Nobody else is woken: a change costs the
//! lock's other waiters nothing (no herd). A payload too long for NOTIFY (many readers granted
//! at once) says "everyone" instead, as does a lost LISTEN connection (a notification may have
//! been missed): every waiter of the lock takes a step.
//!
//! Observers of a lock (an election's watchers) are woken by every notification of it.
//!
//! A locker with nothing to do sends nothing on its connection, so a flow that a NAT or firewall
//! dropped in silence (idle timeouts do) would never end it: every waiter it should wake would
//! sleep on (a granted one until its grant expired, and then until its deadline). So the
//! connection is probed (`SELECT 1`) every request timeout (`crate::conn`'s keeper, or
//! [`probe`] for a connection of the hub's own), and a probe unanswered within the request timeout
//! counts as a lost connection.
//!
//! When the connection is lost, every waiter is told to take a step (a notification may have been
//! missed), and a new connection is opened, with a growing pause, until the locker shuts down. A
//! waiter registers ([`Hub::waiter`]) before its first step, so nothing addressed to it after that
//! step is lost.
//!
//! At start the hub checks that what another connection NOTIFYs reaches its LISTEN
//! ([`check_delivery`]). Behind a transaction pooler it does not (the LISTEN stays on whichever
//! server session ran it, and the notifications go to whichever client that session serves
//! next): connecting then fails at once, with the fix (`listen=`, the server itself or a
//! session-mode pool for this connection, `Config::for_listening`), instead of waiters that
//! nothing wakes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client, Notification};

use crate::config::Config;
use crate::error::pg_error;
use locksmith_core::{LockError, Result};

/// The longest payload sent; PostgreSQL refuses 8000 bytes and more.
const MAX_PAYLOAD: usize = 7900;

/// What a notification tells the waiters it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Directive<'a> {
    /// Entry `id` was granted, with this fencing token (`h<id>:<token>`). `None`: a payload of
    /// schema version 5 (`g<id>`, without the token), whose grant the waiter confirms with a step.
    Granted(&'a str, Option<u64>),
    /// Entry `id` is first in line: it takes a step in `ms` (the earliest holder's lease runs out
    /// then), unless woken before; `None`: no expiry to wait for.
    First(&'a str, Option<u64>),
}

/// The payload of a notification on `segment`: `h<id>:<token>,f<id>:<ms>,…|<segment>`, or
/// `*|<segment>` (every waiter of the lock) when the directives would not fit. A locker of the
/// previous release, which knows no `h`, reads a directive it does not know as "everyone steps".
pub(crate) fn payload(segment: &str, directives: &[Directive<'_>]) -> String {
    let mut text = String::new();
    for d in directives {
        if !text.is_empty() {
            text.push(',');
        }
        match d {
            Directive::Granted(id, Some(token)) => text.push_str(&format!("h{id}:{token}")),
            Directive::Granted(id, None) => text.push_str(&format!("g{id}")),
            Directive::First(id, Some(ms)) => text.push_str(&format!("f{id}:{ms}")),
            Directive::First(id, None) => text.push_str(&format!("f{id}")),
        }
    }
    if text.len() + 1 + segment.len() > MAX_PAYLOAD {
        text = "*".into();
    }
    format!("{text}|{segment}")
}

/// Reads a payload made by [`payload`]: the segment, and the directives (`None`: everyone).
fn parse(payload: &str) -> (&str, Option<Vec<Directive<'_>>>) {
    let Some((directives, segment)) = payload.split_once('|') else {
        return (payload, None);
    };
    if directives == "*" {
        return (segment, None);
    }
    let parsed: Option<Vec<_>> = directives.split(',').filter(|d| !d.is_empty()).map(directive).collect();
    (segment, parsed)
}

/// One directive of a payload.
fn directive(d: &str) -> Option<Directive<'_>> {
    match d.split_at_checked(1)? {
        ("h", rest) => {
            let (id, token) = rest.split_once(':')?;
            Some(Directive::Granted(id, Some(token.parse().ok()?)))
        }
        ("g", id) => Some(Directive::Granted(id, None)),
        ("f", rest) => Some(match rest.split_once(':') {
            Some((id, ms)) => Directive::First(id, Some(ms.parse().ok()?)),
            None => Directive::First(rest, None),
        }),
        _ => None,
    }
}

/// Drops the entries of `map` that `keep` refuses, when the map has doubled since the last time
/// (so that registering stays O(1) on average however many locks a locker waits on).
fn prune_now_and_then<V>(map: &mut HashMap<String, V>, keep: impl FnMut(&String, &mut V) -> bool) {
    if map.len() >= 64 && map.len().is_power_of_two() {
        map.retain(keep);
    }
}

/// What a waiting entry was told since it last looked ([`Waiter::take`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Told {
    /// Take a step now: it was granted, or every waiter of its lock was asked to.
    pub step: bool,
    /// Take a step at this instant, unless told otherwise before (the earliest of what it was
    /// told).
    pub at: Option<Instant>,
    /// It was granted, with this fencing token.
    pub granted: Option<u64>,
}

/// One waiting entry's mailbox: what notifications told it, and a `Notify` to wait on.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    told: Mutex<Told>,
    notify: Notify,
}

impl Waiter {
    /// What it was told since the last call, forgotten now.
    pub fn take(&self) -> Told {
        std::mem::take(&mut *self.told.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Resolves once something is told (at once if something was told since the last wait).
    pub async fn told(&self) {
        self.notify.notified().await;
    }

    fn tell(&self, step: bool, at: Option<Instant>, granted: Option<u64>) {
        {
            let mut told = self.told.lock().unwrap_or_else(|e| e.into_inner());
            told.step |= step;
            told.at = [told.at, at].into_iter().flatten().min();
            told.granted = told.granted.or(granted);
        }
        self.notify.notify_one();
    }
}

/// The wake-ups of one locker.
#[derive(Debug)]
pub(crate) struct Hub {
    /// One `Notify` per lock segment that an observer of this locker watches.
    locks: Mutex<HashMap<String, Weak<Notify>>>,
    /// The waiting entries of this locker, by segment and entry id.
    waiters: Mutex<HashMap<String, HashMap<String, Weak<Waiter>>>>,
    /// The listening task.
    task: Mutex<Option<AbortHandle>>,
    /// Told when a notification on another channel than the locks' arrives: the start's check
    /// ([`check_delivery`]).
    heard: Notify,
}

/// Where a connection hands the notifications it receives ([`drive`]).
#[derive(Clone, Debug)]
pub(crate) struct Listener {
    /// The hub of the locker.
    pub hub: Weak<Hub>,
    /// The channel of the locks (`Sql::channel`); a notification on another one is a check's
    /// ([`check_delivery`]).
    pub channel: String,
}

impl Listener {
    /// Hands `n` to the hub: `false` once the hub is gone.
    fn deliver(&self, n: &Notification) -> bool {
        let Some(hub) = self.hub.upgrade() else {
            return false;
        };
        if n.channel() == self.channel {
            let (segment, directives) = parse(n.payload());
            hub.wake(Some(segment), directives.as_deref());
        } else {
            hub.heard.notify_one();
        }
        true
    }
}

/// Drives `connection` until it ends, handing its notifications to `listener`.
pub(crate) async fn drive(mut connection: crate::dial::Connection, listener: Option<Listener>) {
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(n)) => {
                if let Some(listener) = &listener {
                    if !listener.deliver(&n) {
                        return;
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "postgres: a connection ended");
                return;
            }
        }
    }
}

impl Hub {
    /// A hub whose notifications come from the locker's connection ([`drive`]).
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub {
            locks: Mutex::default(),
            waiters: Mutex::default(),
            task: Mutex::default(),
            heard: Notify::new(),
        })
    }

    /// Makes `task` (the one that keeps the LISTEN going) end with the hub.
    pub fn keep(&self, task: AbortHandle) {
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Tells every waiter of this locker to take a step, and wakes every observer: a notification
    /// may have been missed (the LISTEN connection was lost).
    pub fn wake_all(&self) {
        self.wake(None, None);
    }

    /// Connects a LISTEN connection of the hub's own, to the `listen=` servers (behind a
    /// transaction pooler: an error if the first connection fails), checks that it hears what
    /// `notifier`, the locker's connection, NOTIFYs ([`check_delivery`]), and keeps it listening.
    pub async fn listen_apart(self: &Arc<Self>, config: &Config, channel: &str, notifier: &Client) -> Result<()> {
        let hub = self;
        let config = config.for_listening();
        let first = listen(&config, channel, Arc::downgrade(hub)).await?;
        check_delivery(hub, &first.0, notifier, &config).await?;
        let (channel, weak) = (channel.to_owned(), Arc::downgrade(hub));
        let task = tokio::spawn(async move {
            let mut running = Some(first);
            let mut pause = Duration::from_millis(50);
            loop {
                if let Some((client, driver)) = running.take() {
                    probe(&client, driver, config.request_timeout).await;
                    pause = Duration::from_millis(50);
                }
                let Some(hub) = weak.upgrade() else { return };
                hub.wake(None, None);
                drop(hub);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                match listen(&config, &channel, weak.clone()).await {
                    Ok(driver) => {
                        tracing::debug!("postgres: listening again");
                        if let Some(hub) = weak.upgrade() {
                            hub.wake(None, None); // what changed while no one listened
                        }
                        running = Some(driver);
                    }
                    Err(e) => tracing::debug!(error = %e, "postgres: the LISTEN connection failed; retrying"),
                }
            }
        });
        hub.keep(task.abort_handle());
        Ok(())
    }

    /// The mailbox of entry `id` of lock `segment`, registered while the returned `Arc` lives.
    pub fn waiter(&self, segment: &str, id: &str) -> Arc<Waiter> {
        let waiter = Arc::new(Waiter::default());
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        prune_now_and_then(&mut waiters, |_, ids| {
            ids.retain(|_, w| w.strong_count() > 0);
            !ids.is_empty()
        });
        let ids = waiters.entry(segment.to_owned()).or_default();
        ids.retain(|_, w| w.strong_count() > 0);
        ids.insert(id.to_owned(), Arc::downgrade(&waiter));
        waiter
    }

    /// The `Notify` that every change of lock `segment` wakes (for observers).
    pub fn lock(&self, segment: &str) -> Arc<Notify> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = locks.get(segment).and_then(Weak::upgrade) {
            return notify;
        }
        prune_now_and_then(&mut locks, |_, n| n.strong_count() > 0);
        let notify = Arc::new(Notify::new());
        locks.insert(segment.to_owned(), Arc::downgrade(&notify));
        notify
    }

    /// Wakes the observers of `segment` (or of every lock), and its waiters as `directives` say
    /// (`None`: every waiter of `segment`, or of every lock). One lock's notification looks up
    /// that lock only: a locker may wait on thousands.
    fn wake(&self, segment: Option<&str>, directives: Option<&[Directive<'_>]>) {
        let observers: Vec<Arc<Notify>> = {
            let locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            match segment {
                Some(s) => locks.get(s).and_then(Weak::upgrade).into_iter().collect(),
                None => locks.values().filter_map(Weak::upgrade).collect(),
            }
        };
        for notify in observers {
            notify.notify_waiters();
        }
        let waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        let Some(segment) = segment else {
            for w in waiters.values().flat_map(|ids| ids.values()).filter_map(Weak::upgrade) {
                w.tell(true, None, None);
            }
            return;
        };
        let Some(ids) = waiters.get(segment) else { return };
        let Some(directives) = directives else {
            ids.values()
                .filter_map(Weak::upgrade)
                .for_each(|w| w.tell(true, None, None));
            return;
        };
        for d in directives {
            let (id, step, at, granted) = match *d {
                Directive::Granted(id, token) => (id, true, None, token),
                Directive::First(id, ms) => (
                    id,
                    false,
                    // A millisecond more: the expiry has passed on the server's clock too.
                    Some(Instant::now() + Duration::from_millis(ms.unwrap_or(u64::MAX / 4).min(1 << 40) + 1)),
                    None,
                ),
            };
            if let Some(w) = ids.get(id).and_then(Weak::upgrade) {
                w.tell(step, at, granted);
            }
        }
    }

    /// Ends the listening (the locker shut down).
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long [`check_delivery`] waits for its notification (at most the connect timeout): a server
/// delivers it to an idle session in milliseconds, and the wait comes on top of the connection's
/// own start-up, within what a caller gives connecting.
const DELIVERY: Duration = Duration::from_secs(2);

/// Checks that `listening`, the LISTEN connection of `hub`, hears what `notifier` NOTIFYs, within
/// [`DELIVERY`], on a channel of this check's own.
/// [`LockError::InvalidUrl`] if it does not: the LISTEN went through a transaction (or
/// statement) pooler, which cannot carry it.
pub(crate) async fn check_delivery(hub: &Hub, listening: &Client, notifier: &Client, config: &Config) -> Result<()> {
    let channel = format!("locksmith_check_{:016x}", rand::random::<u64>());
    let limit = config.connect_timeout;
    let statement = |sql: &str| sql.replace("{channel}", &channel);
    run_within(listening, &statement(include_str!("sql/listen.sql")), limit).await?;
    run_within(notifier, &statement(include_str!("sql/notify.sql")), limit).await?;
    let wait = limit.min(DELIVERY);
    let heard = tokio::time::timeout(wait, hub.heard.notified()).await.is_ok();
    run_within(listening, &statement(include_str!("sql/unlisten.sql")), limit).await?;
    if heard {
        return Ok(());
    }
    let (servers, fix) = match config.listen {
        None => (
            "the URL's server",
            "a pooler in transaction or statement mode (PgBouncer's pool_mode = transaction) cannot carry \
             LISTEN: add listen=HOST:PORT to the URL, the PostgreSQL server itself or a session-mode pool, \
             for locksmith's LISTEN connection (every step and renewal can still go through the pooler)",
        ),
        Some(_) => (
            "the listen= server",
            "listen= must name the PostgreSQL server itself or a session-mode pool, not a transaction pooler",
        ),
    };
    Err(LockError::InvalidUrl {
        url: config.url.clone(),
        reason: format!(
            "a NOTIFY from another connection did not reach the LISTEN connection to {servers} within {wait:?}: {fix}"
        ),
    })
}

/// Runs the simple statement `sql` on `client` within `limit`.
async fn run_within(client: &Client, sql: &str, limit: Duration) -> Result<()> {
    match tokio::time::timeout(limit, client.batch_execute(sql)).await {
        Ok(answer) => answer.map_err(|e| pg_error("checking that notifications arrive", e)),
        Err(_) => Err(crate::error::timeout("checking that notifications arrive", limit)),
    }
}

/// Returns once the LISTEN connection of `client` and `driver` is lost: its driver ended, or a
/// probe (`SELECT 1`, sent every `limit`) got no answer within `limit` (then the connection is
/// closed: its driver is aborted). The request timeout as the interval: a silent connection is
/// noticed within two request timeouts, the time in which every other call of the locker gives
/// up on a silent server, whatever the TTLs of the locks it waits on (the hub knows none of
/// them); and one short statement per locker and request timeout (5 s by default) costs the
/// server nothing, and keeps the flow too busy for a NAT's idle timeout (minutes) to drop it.
async fn probe(client: &Client, mut driver: Driver, limit: Duration) {
    loop {
        tokio::select! {
            _ = &mut driver.0 => return,
            _ = tokio::time::sleep(limit) => {}
        }
        match tokio::time::timeout(limit, client.batch_execute(include_str!("sql/probe.sql"))).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "postgres: the LISTEN connection failed a probe");
                break;
            }
            Err(_) => {
                tracing::debug!(
                    ?limit,
                    "postgres: the LISTEN connection did not answer a probe; reconnecting"
                );
                break;
            }
        }
    }
}

/// The task that drives the LISTEN connection: aborted when dropped (a probe got no answer, or
/// the hub stopped), so that its socket closes at once, whatever is unanswered on it.
struct Driver(JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Opens a connection, LISTENs on `channel`, and returns its client (the connection lives while
/// it does) and the task that drives it (and dispatches its notifications) until it is lost.
async fn listen(config: &Config, channel: &str, hub: Weak<Hub>) -> Result<(Client, Driver)> {
    let (client, connection, _) = crate::dial::open(config).await?;
    let listener = Listener {
        hub,
        channel: channel.to_owned(),
    };
    let driver = Driver(tokio::spawn(drive(connection, Some(listener))));
    let listened = tokio::time::timeout(
        config.request_timeout,
        client.batch_execute(&include_str!("sql/listen.sql").replace("{channel}", channel)),
    )
    .await;
    match listened {
        Ok(Ok(())) => Ok((client, driver)),
        Ok(Err(e)) => Err(pg_error("listening", e)),
        Err(_) => Err(crate::error::timeout("listening", config.request_timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back() {
        let directives = [
            Directive::Granted("a1", Some(1_700_000_000_000_001)),
            Directive::First("b2", Some(750)),
            Directive::First("c3", None),
            Directive::Granted("d4", None),
        ];
        let text = payload("mutex/x|y,z", &directives);
        assert_eq!(text, "ha1:1700000000000001,fb2:750,fc3,gd4|mutex/x|y,z");
        let (segment, read) = parse(&text);
        assert_eq!((segment, read.as_deref()), ("mutex/x|y,z", Some(&directives[..])));
        assert_eq!(parse(&payload("s", &[])), ("s", Some(vec![])));
        // Too long for NOTIFY: everyone.
        let many: Vec<String> = (0..1000).map(|i| format!("{i:016x}")).collect();
        let granted: Vec<Directive<'_>> = many.iter().map(|id| Directive::Granted(id, Some(7))).collect();
        let text = payload("s", &granted);
        assert!(text.len() < MAX_PAYLOAD);
        assert_eq!(parse(&text), ("s", None));
        assert_eq!(parse("fX:nope|s").1, None, "a malformed directive wakes everyone");
        assert_eq!(parse("hX|s").1, None, "a grant without its token wakes everyone");
    }

    #[tokio::test]
    async fn a_waiter_hears_only_what_names_it() {
        let hub = Hub {
            locks: Mutex::default(),
            waiters: Mutex::default(),
            task: Mutex::default(),
            heard: Notify::new(),
        };
        let (a, b) = (hub.waiter("s", "a"), hub.waiter("s", "b"));
        hub.wake(Some("s"), Some(&[Directive::Granted("a", Some(9))]));
        assert_eq!(
            a.take(),
            Told {
                step: true,
                at: None,
                granted: Some(9)
            }
        );
        assert_eq!(b.take(), Told::default());
        hub.wake(Some("s"), Some(&[Directive::First("b", Some(0))]));
        let told = b.take();
        assert!(!told.step && told.at.is_some());
        hub.wake(Some("other"), None);
        assert_eq!(a.take(), Told::default());
        hub.wake(Some("s"), None);
        assert!(a.take().step && b.take().step);
    }
}
