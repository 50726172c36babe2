//! `lockchaos worker`: one client process of the fault suite. It loops: acquire its part of the
//! run's primitive (the lock, a permit, a side of the read-write lock, the leadership:
//! [`Role`]), write its fencing token to the fenced register, hold for a random time (cut short
//! when `lost()` fires), write again, release — reporting every step as an [`Event`] on stdout.
//!
//! It runs in a process group of its own (the driver starts it so), so that pausing it
//! (`SIGSTOP` of the group) freezes its watchdog too, as a GC pause or a stopped VM would.
//! `SIGTERM` makes it finish the current step and exit.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use locksmith::{ConnectOptions, LeaderGuard, LockError, LockGuard, Locker};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::events::{now_ns, Event};
use crate::fenced_log::FencedLog;
use crate::primitive::Role;
use crate::register::Register;

/// The worker's command line.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The backend URL (the driver points it at its proxies).
    #[arg(long)]
    pub url: String,
    /// The lock name.
    #[arg(long)]
    pub name: String,
    /// What this worker takes: `mutex`, `permit:N` (a semaphore of N), `read`, `write`,
    /// `leader`.
    #[arg(long, default_value = "mutex", value_parser = parse_role)]
    pub role: Role,
    /// The fenced register's Redis URL.
    #[arg(long)]
    pub register: String,
    /// This worker's id, as the register's log shows it.
    #[arg(long)]
    pub id: String,
    /// The lease TTL (the session TTL on etcd and ZooKeeper).
    #[arg(long, value_parser = parse_ms)]
    pub ttl: Duration,
    /// The shortest hold.
    #[arg(long, default_value = "10", value_parser = parse_ms)]
    pub hold_min: Duration,
    /// The longest hold.
    #[arg(long, default_value = "300", value_parser = parse_ms)]
    pub hold_max: Duration,
    /// A deliberately broken setup (the self-check's): the register accepts every write, and the
    /// worker writes once its hold ends whether or not `lost()` fired, as a holder paused between
    /// checking it and writing would.
    #[arg(long)]
    pub unsafe_register: bool,
    /// Only wait for the lock, forever (for the leak test, which kills waiters).
    #[arg(long)]
    pub wait_only: bool,
    /// The guarded mode: append to the log at this key of the coordination store through
    /// guarded writes instead of writing to the register, and write blind (as
    /// `--unsafe-register` does): the store's check is what must refuse a stale holder.
    #[arg(long)]
    pub guarded_key: Option<String>,
    /// The fenced-store mode: write through `locksmith-fence` to the PostgreSQL server at this
    /// URL instead of the register, and write blind: the fence is what must refuse a stale
    /// holder ([`crate::fenced_log`]).
    #[arg(long)]
    pub fenced_store: Option<String>,
}

/// Where a worker's writes go.
#[derive(Clone)]
pub enum Writes {
    /// The fenced register (checked, or not in the self-check).
    Register(Register),
    /// The log at this key of the coordination store, through guarded writes
    /// ([`crate::guarded_log`]).
    Guarded(String),
    /// A log in storage outside the lock service, through a fence ([`crate::fenced_log`]).
    Fenced(FencedLog),
}

impl Writes {
    /// Where a worker with these options writes: the guarded log at `guarded_key`, the fenced
    /// store at `fenced_store`, or else the register at `register` (checked unless
    /// `unsafe_register`).
    pub async fn open(
        register: &str,
        unsafe_register: bool,
        guarded_key: Option<&str>,
        fenced_store: Option<&str>,
    ) -> Result<Writes> {
        Ok(match (guarded_key, fenced_store) {
            (Some(key), _) => Writes::Guarded(key.to_owned()),
            (None, Some(url)) => Writes::Fenced(FencedLog::connect(url).await?),
            (None, None) => Writes::Register(Register::connect(register, !unsafe_register).await?),
        })
    }

    /// Whether the worker cuts its hold short when `lost()` fires: not in the self-check (an
    /// unchecked register), nor where the storage's own check is under test (guarded, fenced).
    pub fn heeds_lost(&self) -> bool {
        matches!(self, Writes::Register(r) if r.checked())
    }
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).map_err(|e| e.to_string())
}

fn parse_ms(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|e| format!("{s:?}: {e} (a number of milliseconds)"))
}

/// What one worker does, in or out of a process of its own.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The lock name.
    pub name: String,
    /// What it takes.
    pub role: Role,
    /// Its id in the register's log.
    pub id: String,
    /// The lease TTL.
    pub ttl: Duration,
    /// The shortest and longest hold.
    pub hold: (Duration, Duration),
    /// Only wait for the lock (see [`WorkerArgs::wait_only`]).
    pub wait_only: bool,
    /// Cut the hold short when `lost()` fires (false only in the self-check: see
    /// [`WorkerArgs::unsafe_register`]).
    pub heeds_lost: bool,
}

/// Where a worker's events go: stdout in a worker process, a shared list in the driver (mem://).
pub type Sink = dyn Fn(Event) + Send + Sync;

/// Prints `event` as one JSON line on stdout.
pub fn to_stdout(event: Event) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(&event) {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn error(sink: &Sink, what: &str, e: impl std::fmt::Display) {
    sink(Event::Error {
        t: now_ns(),
        what: what.to_owned(),
        error: e.to_string(),
    });
}

/// The worker process: connects, then [`work`]s until SIGTERM.
pub async fn run(args: WorkerArgs) -> Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let (stop_tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        term.recv().await;
        let _ = stop_tx.send(true);
    });
    let options = ConnectOptions::new().session_ttl(args.ttl);
    let locker = loop {
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            connected = locksmith::connect_with(&args.url, &options) => match connected {
                Ok(locker) => break locker,
                Err(e) => {
                    error(&to_stdout, "connect", &e);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            },
        }
    };
    let writes = Writes::open(
        &args.register,
        args.unsafe_register,
        args.guarded_key.as_deref(),
        args.fenced_store.as_deref(),
    )
    .await?;
    let plan = Plan {
        name: args.name,
        role: args.role,
        id: args.id,
        ttl: args.ttl,
        hold: (args.hold_min, args.hold_max),
        wait_only: args.wait_only,
        heeds_lost: writes.heeds_lost(),
    };
    to_stdout(Event::Ready { t: now_ns() });
    work(&locker, &writes, &plan, &to_stdout, &mut stop).await;
    Ok(())
}

/// What a worker holds: a guard, or a leadership (whose guard is inside).
enum Held {
    Guard(LockGuard),
    Leader(LeaderGuard),
}

impl Held {
    fn guard(&self) -> &LockGuard {
        match self {
            Held::Guard(g) => g,
            Held::Leader(l) => l.guard(),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

/// Takes `plan.role` of `plan.name` (waiting up to 60 s).
async fn take(locker: &Locker, plan: &Plan) -> Result<Held, LockError> {
    let limit = Duration::from_secs(60);
    let builder = match plan.role {
        Role::Mutex => locker.lock(&plan.name),
        Role::Permit(n) => locker.semaphore(&plan.name, n),
        Role::Read => locker.rwlock(&plan.name).read(),
        Role::Write => locker.rwlock(&plan.name).write(),
        Role::Leader => {
            let campaign = locker.election(&plan.name).campaign(&plan.id);
            return campaign.ttl(plan.ttl).timeout(limit).acquire().await.map(Held::Leader);
        }
    };
    builder.ttl(plan.ttl).timeout(limit).acquire().await.map(Held::Guard)
}

/// The loop: acquire, write the token, hold (cut short by `lost()`), write again, release; until
/// `stop` turns true.
pub async fn work(locker: &Locker, writes: &Writes, plan: &Plan, sink: &Sink, stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow() {
        let held = tokio::select! {
            _ = stop.changed() => break,
            held = take(locker, plan) => held,
        };
        let held = match held {
            Ok(held) if !plan.wait_only => held,
            Ok(held) => {
                // Only the leak test's waiters get here: hold until told to stop.
                let _ = stop.changed().await;
                drop(held);
                break;
            }
            Err(LockError::Timeout(_)) => continue,
            Err(e) => {
                error(sink, "acquire", &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let guard = held.guard();
        let token = guard.fencing_token();
        sink(Event::Enter { t: now_ns(), token });
        // When `lost()` fired, stamped as it fires (not when this holder next looks: after a write
        // that waited on a partitioned server, or after a blind holder's whole hold), so that the
        // check can tell a holder told before another was granted its lock from one told after.
        let lost = guard.lost();
        let mut told = tokio::spawn(async move {
            let reason = lost.await;
            (now_ns(), reason)
        });
        write(writes, guard, plan, sink, token).await;
        let (min, max) = (plan.hold.0.as_millis(), plan.hold.1.as_millis());
        let hold = Duration::from_millis(u64::try_from(rand::random_range(min..=max.max(min))).unwrap_or(0));
        let cut_short = if plan.heeds_lost {
            tokio::select! {
                biased;
                fired = &mut told => fired.ok(),
                _ = tokio::time::sleep(hold) => None,
            }
        } else {
            // The self-check's blind holder holds for its whole time whatever happens meanwhile,
            // so a pause during the hold always yields a stale write.
            tokio::time::sleep(hold).await;
            None
        };
        if cut_short.is_none() {
            write(writes, guard, plan, sink, token).await;
        }
        let fired = match cut_short {
            Some(fired) => Some(fired),
            // Fired meanwhile (the blind holder's case): its stamp comes at once.
            None if guard.lost_reason().is_some() => told.await.ok(),
            None => {
                told.abort();
                None
            }
        };
        if let Some((t, reason)) = fired {
            sink(Event::Lost {
                t,
                reason: reason.to_string(),
            });
        }
        sink(Event::Exit { t: now_ns() });
        if let (Role::Permit(_), Writes::Register(register)) = (plan.role, writes) {
            // Before the permit goes back, so that its next holder's first write finds it free.
            if let Err(e) = register.leave(&plan.name, token, &plan.id).await {
                error(sink, "register", format!("{e:#}"));
            }
        }
        let ok = held.release().await.is_ok();
        sink(Event::Released { t: now_ns(), ok });
    }
    sink(Event::Done { t: now_ns() });
}

/// One write (to the register, or guarded), reported.
async fn write(writes: &Writes, guard: &LockGuard, plan: &Plan, sink: &Sink, token: u64) {
    let sent = now_ns();
    let accepted = match writes {
        Writes::Register(register) => register.write(&plan.name, plan.role, token, &plan.id).await,
        Writes::Guarded(key) => crate::guarded_log::append(guard, key, token, &plan.id).await,
        Writes::Fenced(log) => log.append(&plan.name, token, &plan.id).await,
    };
    match accepted {
        Ok(accepted) => sink(Event::Write {
            sent,
            t: now_ns(),
            token,
            accepted,
        }),
        Err(e) => error(sink, "register", format!("{e:#}")),
    }
}
