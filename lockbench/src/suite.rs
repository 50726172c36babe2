//! Runs the selected workloads on every selected backend, with the reference rows beside them, and
//! collects a [`Report`]. Anything that cannot run is skipped with a note, never silently.

use std::sync::Arc;

use anyhow::Result;

use crate::cli::{Args, Sizes};
use crate::model::{Machine, Record, Report, SCHEMA};
use crate::reference::{self, Reference};
use crate::system::{LockSystem, Locksmith};
use crate::workloads::{
    self, contended, election, guarded, handover, herd, herd_reference, rwlock, scale, semaphore, takeover, uncontended,
};

/// Whether locksmith's backend `name` is compiled into this lockbench (the facade's registry).
fn built_in(name: &str) -> bool {
    locksmith::backends().iter().any(|d| d.name == name)
}

/// The registry's own `&'static` spelling of a backend name the facade knows, compiled in or not.
fn known(name: &str) -> Option<&'static str> {
    locksmith::KNOWN
        .iter()
        .flat_map(|(_, schemes)| schemes.iter().copied())
        .find(|s| *s == name)
}

fn url_of(args: &Args, backend: &str) -> Option<String> {
    match backend {
        "mem" => Some(args.mem.clone()),
        "file" => Some(args.file.clone()),
        "etcd" => args.etcd.clone(),
        "zk" => args.zk.clone(),
        "redis" => args.redis.clone(),
        "postgres" => args.postgres.clone(),
        "mysql" => args.mysql.clone(),
        _ => None,
    }
}

/// The URL of the backend's secured server (TLS + credentials), from `scripts/backends up`
/// (`LOCKSMITH_TEST_<BACKEND>_SECURE`): its rows show what TLS costs.
fn secure_url(backend: &str) -> Option<String> {
    std::env::var(format!("{}_SECURE", env_var(backend)))
        .ok()
        .filter(|u| !u.is_empty())
}

/// The other ways locksmith reaches `backend`, each a row `system` of its own beside `locksmith`:
/// its secured server (TLS + credentials: what TLS costs) and, for Redis, the plain key layout
/// (`layout=plain`, the one redis-py and redsync use) and Sentinel and Cluster with and without
/// replica confirmation (what they cost), when `scripts/backends up` gave their URLs.
fn variants(backend: &str, url: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(url) = secure_url(backend) {
        out.push(("locksmith+tls", url));
    }
    if backend == "file" {
        // What syncing each grant's token to disk costs (see locksmith-file's `sync=`).
        let sep = if url.contains('?') { '&' } else { '?' };
        out.push(("locksmith+nosync", format!("{url}{sep}sync=off")));
    }
    if backend == "mysql" && !url.contains("procedures=") {
        // Every step a transaction of several statements, as without the stored procedures
        // (a user without CREATE ROUTINE): what the one-call steps save.
        let sep = if url.contains('?') { '&' } else { '?' };
        out.push(("locksmith+noproc", format!("{url}{sep}procedures=off")));
    }
    if backend == "redis" {
        let sep = if url.contains('?') { '&' } else { '?' };
        out.push(("locksmith+plain", format!("{url}{sep}layout=plain")));
        let env = |var: &str| std::env::var(var).ok().filter(|u| !u.is_empty());
        if let Some(url) = env("LOCKSMITH_TEST_REDIS_SENTINEL") {
            // `+wait` is the default (min_replicas=1); the plain rows opt out to show its cost.
            out.push(("locksmith+sentinel", format!("{url}?min_replicas=0")));
            out.push(("locksmith+sentinel+wait", format!("{url}?min_replicas=1")));
        }
        if let Some(url) = env("LOCKSMITH_TEST_REDIS_CLUSTER") {
            out.push(("locksmith+cluster", format!("{url}?min_replicas=0")));
            out.push(("locksmith+cluster+wait", format!("{url}?min_replicas=1")));
        }
    }
    out
}

/// The variable `scripts/backends up` sets for `backend`.
fn env_var(backend: &str) -> String {
    format!("LOCKSMITH_TEST_{}", backend.to_uppercase())
}

/// Runs everything `args` selects.
pub async fn run(args: &Args) -> Result<Report> {
    let sizes = Sizes::new(args.quick);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut report = Report {
        schema: SCHEMA.into(),
        machine: Machine {
            cores,
            note: args.note.clone(),
        },
        results: Vec::new(),
        notes: Vec::new(),
    };
    for backend in &args.backends {
        let backend = backend.as_str();
        let Some(static_name) = known(backend) else {
            let all: Vec<&str> = locksmith::KNOWN.iter().flat_map(|(_, s)| s.iter().copied()).collect();
            report.notes.push(format!(
                "unknown backend {backend:?} skipped (known: {})",
                all.join(", ")
            ));
            continue;
        };
        let Some(url) = url_of(args, backend) else {
            report.notes.push(format!(
                "{backend}: skipped, no URL (set {} with `eval \"$(scripts/backends up)\"` or pass --{backend})",
                env_var(backend)
            ));
            continue;
        };
        let mut run = BackendRun {
            backend: static_name,
            url,
            sizes: &sizes,
            report: &mut report,
            locksmith: None,
            variants: Vec::new(),
            reference: Reference::default(),
            systems: &args.systems,
        };
        run.prepare(args.no_reference).await;
        for workload in &args.workloads {
            run.workload(workload).await;
        }
    }
    report.compute_ratios();
    Ok(report)
}

/// One backend's part of the run.
struct BackendRun<'a> {
    backend: &'static str,
    url: String,
    sizes: &'a Sizes,
    report: &'a mut Report,
    /// locksmith on this backend, when built in and reachable.
    locksmith: Option<Arc<dyn LockSystem>>,
    /// locksmith reaching the backend in other ways ([`variants`]), where they answer.
    variants: Vec<Arc<dyn LockSystem>>,
    reference: Reference,
    /// `--systems`: the only systems to run side by side (empty: all).
    systems: &'a [String],
}

impl BackendRun<'_> {
    async fn prepare(&mut self, no_reference: bool) {
        let b = self.backend;
        if !built_in(b) {
            self.note(format!(
                "{b}: locksmith rows skipped: lockbench was built without the `{b}` feature"
            ));
        } else {
            let sys = Locksmith {
                backend: b,
                url: self.url.clone(),
                system: "locksmith",
            };
            match sys.client().await {
                Ok(_) => self.locksmith = Some(Arc::new(sys)),
                Err(e) => self.note(format!("{b}: locksmith rows skipped: {} unreachable: {e:#}", self.url)),
            }
        }
        for (system, url) in variants(b, &self.url).into_iter().filter(|_| built_in(b)) {
            let sys = Locksmith {
                backend: b,
                url,
                system,
            };
            match sys.client().await {
                Ok(_) => self.variants.push(Arc::new(sys)),
                Err(e) => self.note(format!("{b}: {system} rows skipped: unreachable: {e:#}")),
            }
        }
        if !no_reference {
            match reference::for_backend(b, &self.url).await {
                Ok(r) => self.reference = r,
                Err(why) if b == "mem" => {
                    let _ = why;
                }
                Err(why) => self.note(format!("{b}: reference rows skipped: {why}")),
            }
        }
    }

    fn note(&mut self, note: String) {
        eprintln!("note: {note}");
        self.report.notes.push(note);
    }

    fn push(&mut self, rows: Result<Vec<Record>>, what: &str) {
        match rows {
            Ok(rows) => {
                for r in rows {
                    eprintln!("{}", one_line(&r));
                    self.report.results.push(r);
                }
            }
            Err(e) => self.note(format!("{}: {what} failed: {e:#}", self.backend)),
        }
    }

    async fn workload(&mut self, workload: &str) {
        let (b, sizes) = (self.backend, self.sizes);
        let ls = self.locksmith.clone();
        let floor = self.reference.floor.clone();
        let peers = self.reference.peers.clone();
        let single_attempt = self.reference.single_attempt.clone();
        let variants = self.variants.clone();
        let lock_systems: Vec<Arc<dyn LockSystem>> = ls
            .iter()
            .chain(variants.iter())
            .chain(floor.iter())
            .chain(peers.iter())
            .chain(single_attempt.iter().filter(|_| workload == "uncontended"))
            .filter(|s| self.systems.is_empty() || self.systems.iter().any(|only| only == s.system()))
            .cloned()
            .collect();
        if !self.systems.is_empty() && lock_systems.is_empty() && workload == "uncontended" {
            self.note(format!(
                "{b}: --systems {:?} names no system of this backend",
                self.systems
            ));
        }
        match workload {
            "uncontended" => {
                for (system, row) in uncontended::run(&lock_systems, sizes).await {
                    self.push(row.map(|r| vec![r]), &format!("uncontended ({system})"));
                }
            }
            "handover" => {
                let locksmith: Vec<Arc<dyn LockSystem>> = ls.iter().chain(variants.iter()).cloned().collect();
                let floor = self.reference.notify.clone();
                for (system, rows) in handover::run(&locksmith, floor, &peers, sizes).await {
                    self.push(rows, &format!("handover ({system})"));
                }
            }
            "contended" => {
                if let Some(sys) = &ls {
                    let rows = contended::run(sys.as_ref(), sizes).await;
                    self.push(rows, "contended (locksmith)");
                }
            }
            "herd" => {
                if ls.is_some() {
                    let rows = herd::run(b, &self.url, sizes).await.map(|r| vec![r]);
                    self.push(rows, "herd");
                }
                for sys in self.reference.herd.clone() {
                    let rows = herd_reference::run(sys.as_ref(), &self.url, sizes)
                        .await
                        .map(|r| vec![r]);
                    self.push(rows, &format!("herd ({})", sys.system()));
                }
            }
            "cli" if b == "file" => {
                let rows = workloads::cli::run(&self.url, sizes).await;
                self.push(rows, "cli");
            }
            "cli" => {}
            "takeover" => {
                if b == "mem" {
                    self.note(
                        "mem: takeover skipped: the in-process store cannot be shared with a child process".into(),
                    );
                } else if ls.is_some() {
                    let rows = takeover::run(b, &self.url, sizes).await.map(|r| vec![r]);
                    self.push(rows, "takeover");
                }
            }
            "scale" => {
                if ls.is_some() {
                    let rows = scale::run(b, &self.url, sizes).await;
                    self.push(rows, "scale");
                }
            }
            "guarded" => {
                if ls.is_some() {
                    let plain = self.reference.plain_write.clone();
                    let rows = guarded::run(b, &self.url, plain, sizes).await;
                    self.push(rows, "guarded");
                }
            }
            "semaphore" | "rwlock" | "election" => {
                if ls.is_some() {
                    let url = self.url.clone();
                    let rows = match workload {
                        "semaphore" => semaphore::run(b, &url, sizes).await,
                        "rwlock" => rwlock::run(b, &url, sizes).await,
                        _ => election::run(b, &url, sizes).await,
                    };
                    self.push(rows, workload);
                }
            }
            other => self.note(format!("unknown workload {other:?} skipped")),
        }
    }
}

/// A one-line summary of a row for the terminal.
fn one_line(r: &Record) -> String {
    let mut s = format!("{:>5} {:<13} {:<11}", r.backend, r.system, r.workload);
    for (k, v) in r.params.iter().filter(|(k, _)| !k.starts_with("measured_")) {
        s += &format!(" {k}={v}");
    }
    let fields = [
        ("p50_us", r.p50_us),
        ("p99_us", r.p99_us),
        ("per_s", r.throughput_per_s),
        ("violations", r.violations.map(|v| v as f64)),
        ("req/handover", r.requests_per_handover),
        ("takeover_ms", r.takeover_ms),
        ("renewals/s", r.renewal_requests_per_s),
        ("rss/lock", r.rss_bytes_per_lock),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            s += &format!(" {k}={v:.1}");
        }
    }
    s
}
