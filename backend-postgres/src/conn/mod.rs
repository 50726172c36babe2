//! The connection of one locker, whatever its number of locks and waiters (`link.rs`): the
//! steps (`txn.rs`: a transaction per step, one at a time), the renewals and heartbeats (before
//! any waiting step, so that a backlog of steps never delays them past a TTL), and the LISTEN
//! (`crate::wake`) share it; it is opened again when lost, and kept listening ([`keep_listening`]).
//! Behind a transaction pooler (`listen=`), the LISTEN has a connection of its own to the
//! `listen=` servers. And this locker's owner row, whose expiry keeps its waiters alive.

mod txn;

mod link;
mod params;
mod statements;

pub(crate) use link::{ClientGuard, Link};
pub(crate) use params::Params;
pub(crate) use statements::Statements;
pub(crate) use txn::{Outcome, Step};

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use locksmith_core::{LockError, Result};

use crate::config::{Config, Replication};
use crate::dial::Server;
use crate::error::{pg_error, timeout};
use crate::layout::Sql;
use crate::wake::{Hub, Listener};

/// The format version of the tables this release reads and writes (`src/sql/schema.sql`).
const VERSION: &str = "7";
/// The versions this release migrates from (`src/sql/migrate.sql`).
const PREVIOUS: [&str; 6] = ["1", "2", "3", "4", "5", "6"];

/// One locker's connections and identity.
#[derive(Debug)]
pub(crate) struct Conn {
    /// The URL's settings.
    pub config: Config,
    /// The statements of the schema.
    pub sql: Sql,
    /// The connection: the steps (one at a time), the sweep, `list`/`inspect`, the renewals and
    /// heartbeats (before any waiting step: a lease renewed late is lost), and the LISTEN (unless
    /// a transaction pooler keeps it apart).
    pub link: Link,
    /// This locker's owner row.
    pub owner_id: String,
    /// This process, as entries record it.
    pub pid: i32,
    /// This host's name.
    pub host: String,
    /// The wake-ups of this locker.
    pub hub: Arc<Hub>,
    /// Set by `shutdown`.
    closed: AtomicBool,
    /// Until when this locker's owner row lives for sure (by this process's clock), and how many
    /// times a beat came after that ([`Conn::keep_alive`]).
    alive: std::sync::Mutex<(Instant, u64)>,
    /// The holders this locker was granted in lock rows (`grant_in_row`) and has not released
    /// yet, by entry id: their segments, which [`Conn::close`] frees (the rows have no index by
    /// owner to find them with).
    kept_in_rows: std::sync::Mutex<HashMap<String, String>>,
}

impl Conn {
    /// Connects, creates the tables if missing, checks their version, adds this locker's owner
    /// row and starts listening: on its connection, which must hear what another connection
    /// NOTIFYs (a second one, opened beside it for that check alone: not behind a transaction
    /// pooler, see `crate::wake`); with `listen=`, on a connection of its own.
    pub async fn open(config: Config) -> Result<Arc<Conn>> {
        let sql = Sql::new(&config.schema);
        let hub = Hub::new();
        let listener = (!config.pooled()).then(|| Listener {
            hub: Arc::downgrade(&hub),
            channel: sql.channel.clone(),
        });
        let (client, checker) = match &listener {
            Some(listener) => {
                let (client, checker) =
                    tokio::try_join!(connect_for_steps(&config, Some(listener)), connect(&config, None))?;
                (client, Some(checker))
            }
            None => (connect_for_steps(&config, None).await?, None),
        };
        let prepared = prepare_tables(&client, &sql, &config.schema);
        client
            .set_up("creating the tables", config.request_timeout, prepared)
            .await?;
        match checker {
            Some(checker) => crate::wake::check_delivery(&hub, &client, &checker, &config).await?,
            None => hub.listen_apart(&config, &sql.channel, &client).await?,
        }
        let conn = Conn {
            owner_id: format!("{:016x}", rand::random::<u64>()),
            pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            host: host_name(),
            link: Link::new(client, listener, &config),
            hub,
            sql,
            config,
            closed: AtomicBool::new(false),
            alive: std::sync::Mutex::new((Instant::now(), 0)),
            kept_in_rows: std::sync::Mutex::new(HashMap::new()),
        };
        let conn = Arc::new(conn);
        conn.beat(Duration::ZERO).await?;
        if !conn.config.pooled() {
            let keeper = tokio::spawn(keep_listening(Arc::downgrade(&conn)));
            conn.hub.keep(keeper.abort_handle());
        }
        Ok(conn)
    }

    /// [`LockError::Closed`] once [`Conn::close`] ran.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LockError::Closed);
        }
        Ok(())
    }

    /// The connection, reconnected if it was lost. Held for one step at a time.
    pub async fn client(&self) -> Result<ClientGuard> {
        self.link.client(&self.config).await
    }

    /// Runs `request` with the connection ([`Conn::client`]) in the caller's task, handed off into
    /// a task of its own if its caller stops polling it while another request of this locker
    /// waits ([`Link::in_caller`]).
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for the connection, nothing runs; dropped after, `request` runs to
    /// its end in a task of its own.
    pub async fn with_client<T, F>(
        self: &Arc<Self>,
        request: impl FnOnce(Arc<Conn>, ClientGuard) -> F + Send + 'static,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let (waiting, conn) = (self.clone(), self.clone());
        let connection = async move { waiting.client().await };
        self.link.in_caller(connection, move |guard| request(conn, guard)).await
    }

    /// The statements prepared on the connection.
    pub fn statements(&self) -> &Statements {
        &self.link.statements
    }

    /// Runs the read `sql` on the steps' connection, within the request timeout: its rows. One
    /// that got no answer drops the connection, as a step does: a connection that went silent
    /// (a flow a NAT dropped) would otherwise hold every later step of this locker up behind the
    /// read (an election's observer reads on its own, with nobody to time it out). A read whose
    /// caller gave up keeps it ([`Link::read_within`]). Run in the caller's task, handed off into
    /// a task of its own if its caller stops polling it while another request waits for the
    /// connection ([`Link::in_caller`]).
    pub async fn read(
        self: &Arc<Self>,
        what: &'static str,
        doing: &'static str,
        sql: fn(&Sql) -> &str,
        params: impl Params,
    ) -> Result<Vec<tokio_postgres::Row>> {
        self.check_open()?;
        let read = move |conn: Arc<Conn>, guard| async move {
            let link = &conn.link;
            (link.read_within(guard, &conn.config, what, doing, sql(&conn.sql), &params.refs(&conn))).await
        };
        self.with_client(read).await
    }

    /// Keeps this locker's waiters alive for a waiter whose lease is `ttl`: beats (at most one
    /// beat per third of a TTL for all the waiters of this locker) and then sweeps the queues
    /// that dead lockers' waiters hold up ([`Conn::sweep`]). Returns how many times this locker
    /// has found its owner row possibly expired (a pause, a lost server): a waiter that has not
    /// stepped since the count last moved takes a step, as its entry may be gone.
    pub async fn keep_alive(self: &Arc<Self>, ttl: Duration) -> Result<u64> {
        let now = Instant::now();
        let (until, late) = *self.alive.lock().unwrap_or_else(|e| e.into_inner());
        if !self.needs_beat(ttl) {
            return Ok(late);
        }
        self.beat(ttl).await?;
        let late = {
            let mut alive = self.alive.lock().unwrap_or_else(|e| e.into_inner());
            if until <= now {
                alive.1 += 1;
            }
            alive.0 = alive.0.max(now + ttl);
            alive.1
        };
        self.sweep().await?;
        Ok(late)
    }

    /// Whether a waiter whose lease is `ttl` should beat now: this locker's owner row may not
    /// live two thirds of `ttl` more.
    pub fn needs_beat(&self, ttl: Duration) -> bool {
        let until = self.alive.lock().unwrap_or_else(|e| e.into_inner()).0;
        until < Instant::now() + ttl * 2 / 3
    }

    /// Records a beat of `ttl` sent at `sent` (a join beats in its own transaction).
    pub fn beaten(&self, sent: Instant, ttl: Duration) {
        let mut alive = self.alive.lock().unwrap_or_else(|e| e.into_inner());
        alive.0 = alive.0.max(sent + ttl);
    }

    /// How many times [`Conn::keep_alive`] found the owner row possibly expired.
    pub fn late_beats(&self) -> u64 {
        self.alive.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    /// This locker's heartbeat: its owner row (re-added if it was removed) lives for at least
    /// `ttl` from now (server clock), and its waiters with it. Before any waiting step, within
    /// the request timeout; one that got no answer drops the connection, as a renewal does
    /// (`crate::renew`).
    pub async fn beat(self: &Arc<Self>, ttl: Duration) -> Result<()> {
        let what = "a heartbeat";
        let (waiting, conn, params) = (self.clone(), self.clone(), params::Beat(millis(ttl)));
        let request = async move { waiting.link.request(&waiting.config, what).await };
        let beat = move |request| async move {
            let (sql, params) = (&conn.sql.beat, params.refs(&conn));
            (conn.link.query_on(request, &conn.config, what, "beating", sql, &params)).await
        };
        self.link.in_caller(request, beat).await?;
        Ok(())
    }

    /// Records that entry `id` holds lock `segment` in its row (`grant_in_row`), until
    /// [`Conn::forget_kept`].
    pub fn kept_in_row(&self, segment: &str, id: &str) {
        let mut kept = self.kept_in_rows.lock().unwrap_or_else(|e| e.into_inner());
        kept.insert(id.to_owned(), segment.to_owned());
    }

    /// Entry `id` is being released: [`Conn::close`] need not free its row.
    pub fn forget_kept(&self, id: &str) {
        self.kept_in_rows.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    /// Ends this locker: refuses new steps, stops listening (whatever the statements then do:
    /// nothing can use the LISTEN connection any more, and a failed or cut-off close left it
    /// reconnecting for as long as the locker lived), removes its owner row and entries, frees
    /// the lock rows it holds and wakes the locks of its entries.
    pub async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        // First: the statements below may be cut off by the shutdown's timeout.
        self.hub.stop();
        self.remove_entries().await
    }

    /// [`Conn::close`]'s statements: removes this locker's owner row and entries, frees the lock
    /// rows it holds, and passes on the locks of its entries.
    async fn remove_entries(&self) -> Result<()> {
        let (ids, segments): (Vec<String>, Vec<String>) = {
            let kept = self.kept_in_rows.lock().unwrap_or_else(|e| e.into_inner());
            kept.iter().map(|(id, seg)| (id.clone(), seg.clone())).unzip()
        };
        let mut guard = self.client().await?;
        let client = guard.as_deref_mut().ok_or(LockError::Closed)?;
        let e = |err| pg_error("removing this locker's entries", err);
        let statements = self.statements();
        let tx = statements.begin(client).await.map_err(e)?;
        // The rows first, then the entries in a statement with a newer snapshot (see Sql::close).
        (statements.execute(&tx, &self.sql.close_rows, &[&self.owner_id, &segments, &ids]))
            .await
            .map_err(e)?;
        let rows = (statements.query(&tx, &self.sql.close, &[&self.owner_id]))
            .await
            .map_err(e)?;
        tx.commit().await.map_err(e)?;
        for row in rows {
            let Ok(segment) = row.try_get::<_, String>(0) else {
                continue;
            };
            // Pass on what this locker held, as its releases would have.
            if let Err(e) = self.pass_on(client, &segment).await {
                tracing::debug!(error = %e, "postgres: could not pass a lock on at shutdown");
            }
        }
        Ok(())
    }
}

/// Creates the tables of `schema` if missing (the DDL only then: even `CREATE INDEX IF NOT
/// EXISTS` takes a table lock that waits for every step in flight), migrates them from the
/// previous version, and checks that they are of this release's version.
async fn prepare_tables(client: &Client, sql: &Sql, schema: &str) -> Result<()> {
    let version = match read_version(client, sql).await {
        Err(e)
            if e.code()
                .is_some_and(|c| *c == SqlState::UNDEFINED_TABLE || *c == SqlState::INVALID_SCHEMA_NAME) =>
        {
            client.batch_execute(&sql.create).await.map_err(|e| {
                pg_error(
                    "creating the tables (a user without CREATE needs them made beforehand: `locksmith init`)",
                    e,
                )
            })?;
            read_version(client, sql).await
        }
        Ok(version) if PREVIOUS.contains(&version.as_str()) => {
            client.batch_execute(&sql.migrate).await.map_err(|e| {
                let what = format!(
                    "migrating the tables from version {version} to {VERSION} (a user without the \
                     rights of their owner needs them migrated by it: `locksmith init`)"
                );
                pg_error(&what, e)
            })?;
            read_version(client, sql).await
        }
        other => other,
    };
    let version = version.map_err(|e| pg_error("reading the tables' version", e))?;
    if version != VERSION {
        return Err(LockError::Protocol(format!(
            "the tables in schema {schema} are of version {version}; this release reads version {VERSION}"
        )));
    }
    Ok(())
}

/// The format version in the `meta` table (empty if it has none). A simple query: nothing is
/// prepared on a session a pooler may give to another client next.
async fn read_version(client: &Client, sql: &Sql) -> std::result::Result<String, tokio_postgres::Error> {
    Ok(first_value(&client.simple_query(&sql.version).await?).unwrap_or_default())
}

/// The first column of the first row of a simple query's answer, if any.
pub(crate) fn first_value(answer: &[tokio_postgres::SimpleQueryMessage]) -> Option<String> {
    answer.iter().find_map(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}

/// An open connection: its client, and the task that drives it.
#[derive(Debug)]
pub(crate) struct Connected {
    client: Client,
    /// The connection's task.
    driver: AbortHandle,
    /// Fails `changed()` once the connection ended (the server closed it, the network failed,
    /// or it was dropped).
    pub ended: watch::Receiver<()>,
    /// The server it is on.
    pub server: Server,
    /// Whether its session plans every statement once ([`connect_for_steps`]).
    pub generic_plans: bool,
}

impl Connected {
    /// Drops the connection at once, with requests still unanswered on it: its task ends and its
    /// socket closes with a reset (`dial.rs`), so nothing it had not delivered yet is delivered
    /// later. Dropping only the client would leave the task waiting for those answers, and TCP
    /// sending the requests whenever the network let it: after the clean-up sent over a new
    /// connection.
    pub fn abandon(self) {
        self.driver.abort();
    }

    /// `request` (one that sets this connection up) within `limit`: past it, the connection is
    /// abandoned (its task aborted, see [`Connected::abandon`]) and the error says that `what`
    /// took longer.
    pub async fn set_up<T>(&self, what: &str, limit: Duration, request: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(limit, request).await {
            Ok(answer) => answer,
            Err(_) => {
                self.driver.abort();
                Err(timeout(what, limit))
            }
        }
    }
}

impl std::ops::Deref for Connected {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Connected {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// Abandons the connection in `slot`, if any ([`Connected::abandon`]), leaving `None`.
pub(crate) fn abandon(slot: &mut Option<Connected>) {
    if let Some(connected) = slot.take() {
        connected.abandon();
    }
}

/// Opens one connection (within `connect_timeout`), drives it in a task of its own (handing its
/// notifications to `listener`, if any), sets up its session, and LISTENs on `listener`'s
/// channel.
pub(crate) async fn connect(config: &Config, listener: Option<&Listener>) -> Result<Connected> {
    let (client, connection, server) = crate::dial::open(config).await?;
    let (alive, ended) = watch::channel(());
    let listening = listener.cloned();
    let driver = tokio::spawn(async move {
        crate::wake::drive(connection, listening).await;
        drop(alive);
    })
    .abort_handle();
    let connected = Connected {
        client,
        driver,
        ended,
        server,
        generic_plans: false,
    };
    let setup = async {
        session_settings(&connected, config).await?;
        if let Some(listener) = listener {
            let listen = include_str!("../sql/listen.sql").replace("{channel}", &listener.channel);
            (connected.batch_execute(&listen).await).map_err(|e| pg_error("listening", e))?;
        }
        Ok(())
    };
    connected
        .set_up("setting up a connection", config.connect_timeout, setup)
        .await?;
    Ok(connected)
}

/// Makes every transaction of this session read committed, and every commit durable before it
/// is answered, whatever the server's default (a grant answered but lost in a crash would hand
/// the lock out again): `synchronous_commit = on`, which also waits for the server's
/// synchronous standbys (a grant lost in a failover to a standby that had not received it would
/// too). With [`Replication::Sync`] the server must have such a standby; with
/// [`Replication::Async`] the commit waits for the primary's own disk only (`local`).
///
/// And the server ends a session left idle inside a transaction for longer than the request
/// timeout (at least a second, at most a day): a step whose connection went silent mid-transaction (its answers
/// lost, its close never seen) would otherwise keep the lock's row locked against every client
/// until the server's TCP gave up, minutes to hours later. No step waits that long between two
/// of its statements: the request timeout has ended it before.
///
/// Read committed too, whatever the server's, database's or role's default: the statements count
/// on a statement that waited for a row lock reading the row as committed meanwhile (under
/// `repeatable read`, every two steps on one lock at once failed to serialize).
///
/// Behind a transaction pooler ([`Config::pooled`]) nothing is set here (a setting would stay on
/// whichever server session ran it, for other clients, and miss the next transaction of ours):
/// every transaction sets them for itself ([`transaction_settings`]).
async fn session_settings(client: &Client, config: &Config) -> Result<()> {
    let (commits, idle_ms) = settings(config);
    let standbys = include_str!("../sql/standbys.sql");
    let sql = match config.pooled() {
        false => {
            include_str!("../sql/session_settings.sql")
                .replace("{commits}", commits)
                .replace("{idle_ms}", &idle_ms.to_string())
                + standbys
        }
        true => standbys.to_owned(),
    };
    let answer = client
        .simple_query(&sql)
        .await
        .map_err(|e| pg_error("setting up the session", e))?;
    let standbys = first_value(&answer);
    if config.replication == Replication::Sync && standbys.as_deref().unwrap_or("").trim().is_empty() {
        return Err(LockError::Protocol(
            "postgres: the primary has no synchronous standby (synchronous_standby_names is empty): a \
             failover to a standby could hand a lock and its fencing token out twice. Configure one, or add \
             replication=async to the URL to accept that"
                .into(),
        ));
    }
    Ok(())
}

/// What [`session_settings`] sets: `synchronous_commit`, and `idle_in_transaction_session_timeout`
/// in milliseconds (the request timeout, within what the setting takes: at least a second, at
/// most a day).
fn settings(config: &Config) -> (&'static str, u128) {
    let commits = match config.replication {
        Replication::Async => "local",
        Replication::Sync | Replication::AsConfigured => "on",
    };
    let idle = config
        .request_timeout
        .clamp(Duration::from_secs(1), Duration::from_secs(86_400));
    (commits, idle.as_millis())
}

/// What every transaction sets first behind a transaction pooler ([`Config::pooled`]), for itself
/// alone: what [`session_settings`] sets for a whole session of ours.
pub(crate) fn transaction_settings(config: &Config) -> String {
    let (commits, idle_ms) = settings(config);
    include_str!("../sql/transaction_settings.sql")
        .replace("{commits}", commits)
        .replace("{idle_ms}", &idle_ms.to_string())
}

/// [`connect`], for the steps: every statement of a step looks up one lock's rows by index
/// whatever its parameters, so each is planned once per session (PostgreSQL otherwise plans the
/// first five runs of every prepared statement, and of every statement in alone.sql's
/// functions, again: twice the time of a step on a fresh connection). Not for the leases
/// connection: its renewal joins a whole array of ids, whose generic plan (which cannot know the
/// array's size) loops over the array for every lease of the locker. Servers before 12 lack the
/// setting; that is harmless.
///
/// Behind a transaction pooler, nothing is set (see [`session_settings`]), and statements are not
/// prepared ([`Statements`]).
pub(crate) async fn connect_for_steps(config: &Config, listener: Option<&Listener>) -> Result<Connected> {
    let mut connected = connect(config, listener).await?;
    if config.pooled() {
        return Ok(connected);
    }
    let generic = async {
        match connected.batch_execute(include_str!("../sql/generic_plans.sql")).await {
            Ok(()) => Ok(true),
            Err(e) => {
                tracing::debug!(error = %e, "postgres: plan_cache_mode not set");
                Ok(false)
            }
        }
    };
    connected.generic_plans = connected
        .set_up("setting up a connection", config.connect_timeout, generic)
        .await?;
    Ok(connected)
}

/// Keeps the LISTEN of the locker's connection going (not behind a transaction pooler, where it
/// has a connection of its own, `crate::wake`): probes the connection (`SELECT 1`) every request
/// timeout, so that a connection gone silent is dropped (a probe unanswered within the request
/// timeout drops it, [`Link::read_within`]) and a NAT keeps the flow; when it is lost, tells every
/// waiter to take a step (a notification may have been missed) and opens a new one (which
/// LISTENs again), with a growing pause while that fails. Ends with the locker.
async fn keep_listening(conn: Weak<Conn>) {
    let mut pause = Duration::from_millis(50);
    let mut told = false;
    loop {
        let Some(locker) = conn.upgrade() else { return };
        let limit = locker.config.request_timeout;
        let ended = locker.link.ended().await;
        drop(locker);
        if let Some(mut ended) = ended {
            (pause, told) = (Duration::from_millis(50), false);
            tokio::select! {
                _ = ended.changed() => {}
                _ = tokio::time::sleep(limit) => {
                    let Some(locker) = conn.upgrade() else { return };
                    if let Err(e) = locker.read("a probe", "probing the connection", |_| include_str!("../sql/probe.sql"), ()).await {
                        tracing::debug!(error = %e, "postgres: the connection failed a probe");
                    }
                }
            }
            continue;
        }
        // None open: the waiters may have missed a notification; then open one.
        let Some(locker) = conn.upgrade() else { return };
        if locker.check_open().is_err() {
            return;
        }
        if !std::mem::replace(&mut told, true) {
            locker.hub.wake_all();
        }
        drop(locker);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
        let Some(locker) = conn.upgrade() else { return };
        let opened = locker.client().await.map(drop);
        match opened {
            Ok(()) => tracing::debug!("postgres: listening again"),
            Err(e) => tracing::debug!(error = %e, "postgres: the connection failed; retrying"),
        }
    }
}

/// Milliseconds, as the tables store them.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// This host's name (what `inspect` shows beside the pid).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}
