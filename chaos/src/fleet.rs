//! The worker processes of one run: started through proxies of the driver's, each in a process
//! group of its own, their events collected as they come.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use locksmith_core::conformance::proxy::{Mode, Proxy};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::events::{now_ns, Event};
use crate::primitive::{Primitive, Role};
use crate::targets::Target;
use crate::worker::{work, Plan, Writes};

/// What a worker needs besides the target.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// The lock every worker contends for.
    pub name: String,
    /// What it is (each worker's part: [`Primitive::role`]).
    pub primitive: Primitive,
    /// The fenced register's URL.
    pub register: String,
    /// The self-check's broken setup: the register accepts every write and the worker writes
    /// after a lost lock too (see [`crate::worker::WorkerArgs::unsafe_register`]).
    pub unsafe_register: bool,
    /// Only wait for the lock (the leak test).
    pub wait_only: bool,
    /// The longest hold (the shortest is 10 ms).
    pub hold_max: Duration,
    /// The guarded mode's log key (see [`crate::worker::WorkerArgs::guarded_key`]).
    pub guarded_key: Option<String>,
    /// The fenced-store mode's URL (see [`crate::worker::WorkerArgs::fenced_store`]).
    pub fenced_store: Option<String>,
}

/// How a worker runs.
enum Runner {
    /// A process of its own (every networked backend).
    Process(Child),
    /// A task of the driver (`mem://`, which lives in one process), stopped through `stop`.
    Task(tokio::task::JoinHandle<()>, watch::Sender<bool>),
}

/// One worker.
pub struct Worker {
    /// Its id in the register's log.
    pub id: String,
    /// Its part.
    pub role: Role,
    runner: Runner,
    /// Its process group (= its pid); 0 for a task.
    pub pgid: i32,
    /// One proxy per server of the target: how the driver cuts it off.
    pub proxies: Vec<Proxy>,
    /// Killed by a fault (its last critical section ends at this time).
    pub killed_at: Option<u64>,
}

/// The workers of one run and everything they reported, as `(worker index, event)`.
pub struct Fleet {
    /// The workers, in start order (a replacement gets the next index).
    pub workers: Vec<Worker>,
    events: Arc<Mutex<Vec<(usize, Event)>>>,
    target: Target,
    spec: WorkerSpec,
}

impl Fleet {
    /// The lock the workers contend for.
    pub fn lock_name(&self) -> &str {
        &self.spec.name
    }

    /// An empty fleet for `target`.
    pub fn new(target: &Target, spec: WorkerSpec) -> Fleet {
        Fleet {
            workers: Vec::new(),
            events: Arc::default(),
            target: target.clone(),
            spec,
        }
    }

    /// Starts one more worker: a process behind proxies of its own, or a task for `mem://`.
    pub async fn spawn(&mut self) -> Result<usize> {
        if self.target.backend == "mem" {
            return self.spawn_task().await;
        }
        let index = self.workers.len();
        let mut proxies = Vec::new();
        for host in self.target.hosts()? {
            proxies.push(Proxy::start(&host).await);
        }
        let addrs: Vec<String> = proxies.iter().map(Proxy::addr).collect();
        let url = self.target.url_with_hosts(&addrs)?;
        let id = format!("w{index}");
        let role = self.spec.primitive.role(index);
        let mut cmd = Command::new(std::env::current_exe().context("the lockchaos binary")?);
        cmd.arg("worker")
            .args([
                "--url",
                &url,
                "--name",
                &self.spec.name,
                "--register",
                &self.spec.register,
            ])
            .args(["--id", &id, "--role", &role.arg()])
            .args(["--ttl", &self.target.ttl.as_millis().to_string()])
            .args(["--hold-max", &self.spec.hold_max.as_millis().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .process_group(0);
        if self.spec.unsafe_register {
            cmd.arg("--unsafe-register");
        }
        if self.spec.wait_only {
            cmd.arg("--wait-only");
        }
        if let Some(url) = &self.spec.fenced_store {
            cmd.args(["--fenced-store", url]);
        }
        if let Some(key) = &self.spec.guarded_key {
            cmd.args(["--guarded-key", key]);
        }
        let mut child = cmd.spawn().context("starting a worker")?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).context("worker pid")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let events = self.events.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Event>(&line) {
                    Ok(event) => lock(&events).push((index, event)),
                    Err(e) => tracing::warn!(worker = index, error = %e, line, "not an event"),
                }
            }
        });
        self.workers.push(Worker {
            id,
            role,
            runner: Runner::Process(child),
            pgid,
            proxies,
            killed_at: None,
        });
        Ok(index)
    }

    /// A worker as a task of this process, on its own `connect` (the `mem://` store is shared by
    /// all connects of one process).
    async fn spawn_task(&mut self) -> Result<usize> {
        let index = self.workers.len();
        let id = format!("w{index}");
        let role = self.spec.primitive.role(index);
        let locker = locksmith::connect(&self.target.url).await?;
        let writes = Writes::open(
            &self.spec.register,
            self.spec.unsafe_register,
            self.spec.guarded_key.as_deref(),
            self.spec.fenced_store.as_deref(),
        )
        .await?;
        let plan = Plan {
            name: self.spec.name.clone(),
            role,
            id: id.clone(),
            ttl: self.target.ttl,
            hold: (Duration::from_millis(10), self.spec.hold_max),
            wait_only: self.spec.wait_only,
            heeds_lost: writes.heeds_lost(),
        };
        let (stop_tx, mut stop) = watch::channel(false);
        let events = self.events.clone();
        let task = tokio::spawn(async move {
            let sink = move |e: Event| lock(&events).push((index, e));
            sink(Event::Ready { t: now_ns() });
            work(&locker, &writes, &plan, &sink, &mut stop).await;
        });
        self.workers.push(Worker {
            id,
            role,
            runner: Runner::Task(task, stop_tx),
            pgid: 0,
            proxies: Vec::new(),
            killed_at: None,
        });
        Ok(index)
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<(usize, Event)> {
        lock(&self.events).clone()
    }

    /// Waits until `count` events satisfy `pred`, at most `limit`.
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        count: usize,
        pred: impl Fn(&Event) -> bool,
    ) -> Result<()> {
        let end = Instant::now() + limit;
        loop {
            if lock(&self.events).iter().filter(|(_, e)| pred(e)).count() >= count {
                return Ok(());
            }
            if Instant::now() > end {
                bail!("{what}: not seen within {limit:?}; {}", self.describe());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Each worker's last event and how long ago, with its last error if any: what a run that
    /// got stuck reports.
    pub fn describe(&self) -> String {
        let events = lock(&self.events);
        let now = now_ns();
        let ago = |t: u64| format!("{} ms ago", now.saturating_sub(t) / 1_000_000);
        let mut out = Vec::new();
        for (w, worker) in self.workers.iter().enumerate() {
            let mine = || events.iter().filter(|(x, _)| *x == w).map(|(_, e)| e);
            let last = match mine().next_back() {
                Some(e) => format!("last {e:?} ({})", ago(e.t())),
                None => "no event".into(),
            };
            let errors = mine().filter(|e| matches!(e, Event::Error { .. })).count();
            let last_error = mine().rfind(|e| matches!(e, Event::Error { .. }));
            let killed = if worker.killed_at.is_some() { ", killed" } else { "" };
            out.push(match last_error {
                Some(e) => format!("{}{killed}: {last}; {errors} errors, the last {e:?}", worker.id),
                None => format!("{}{killed}: {last}", worker.id),
            });
        }
        format!("workers: {}", out.join(" | "))
    }

    /// The worker inside its critical section right now (entered, not exited), if any; the one
    /// that entered last if several are (which only a broken lock allows).
    pub fn holder(&self) -> Option<usize> {
        let events = lock(&self.events);
        let mut inside: Vec<(usize, u64)> = Vec::new();
        for (w, e) in events.iter() {
            match e {
                Event::Enter { t, .. } => inside.push((*w, *t)),
                Event::Exit { .. } => inside.retain(|(x, _)| x != w),
                _ => {}
            }
        }
        inside
            .into_iter()
            .filter(|(w, _)| self.workers[*w].killed_at.is_none())
            .max_by_key(|(_, t)| *t)
            .map(|(w, _)| w)
    }

    /// Waits until some worker holds the lock (at most `limit`); returns it.
    pub async fn wait_holder(&self, limit: Duration) -> Result<usize> {
        let end = Instant::now() + limit;
        loop {
            if let Some(w) = self.holder() {
                return Ok(w);
            }
            if Instant::now() > end {
                bail!("nobody got the lock within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Sends `signal` to worker `w`'s process group (nothing for a task).
    pub fn signal(&self, w: usize, signal: i32) {
        let pgid = self.workers[w].pgid;
        if pgid > 0 {
            // SAFETY: kill(2) on a process group we created; a stale group is only an error code.
            unsafe { libc::kill(-pgid, signal) };
        }
    }

    /// Kills worker `w` (`SIGKILL`) and records when.
    pub fn kill(&mut self, w: usize) {
        self.signal(w, libc::SIGKILL);
        self.workers[w].killed_at = Some(now_ns());
    }

    /// Sets the proxies of worker `w`.
    pub fn cut(&self, w: usize, mode: Mode) {
        for p in &self.workers[w].proxies {
            p.set(mode);
        }
    }

    /// Stops every worker: resumes the paused, heals the cut, `SIGTERM`, and `SIGKILL` for those
    /// still running after `grace`.
    ///
    /// # Errors
    ///
    /// A worker that had ended by itself before (a panic, a crash; not one a fault killed): its
    /// contention was missing from the run, which must not pass for one that had it.
    pub async fn stop(&mut self, grace: Duration) -> Result<()> {
        let mut ended = Vec::new();
        for worker in &mut self.workers {
            if worker.killed_at.is_some() {
                continue;
            }
            match &mut worker.runner {
                Runner::Process(child) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        ended.push(format!("{} ({status})", worker.id));
                    }
                }
                Runner::Task(task, _) => {
                    if task.is_finished() {
                        ended.push(worker.id.clone());
                    }
                }
            }
        }
        for w in 0..self.workers.len() {
            self.cut(w, Mode::Forward);
            self.signal(w, libc::SIGCONT);
            self.signal(w, libc::SIGTERM);
        }
        let end = Instant::now() + grace;
        for worker in &mut self.workers {
            let left = end.saturating_duration_since(Instant::now());
            match &mut worker.runner {
                Runner::Process(child) => {
                    if tokio::time::timeout(left, child.wait()).await.is_err() {
                        tracing::warn!(worker = worker.id, "still running after SIGTERM: SIGKILL");
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                }
                Runner::Task(task, stop) => {
                    let _ = stop.send(true);
                    if tokio::time::timeout(left, &mut *task).await.is_err() {
                        task.abort();
                    }
                }
            }
        }
        // The readers see EOF right after the exits; give them a moment to push the last lines.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !ended.is_empty() {
            bail!("workers ended by themselves during the run: {}", ended.join(", "));
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
