//! `docs/reliability.md`: the page, generated from one run's figures.

use std::fmt::Write as _;

use crate::report::{Report, Row};

fn f(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}"))
}

fn fault_rows(rows: &[&Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            vec![
                format!("{}/{}", r.backend, r.topology),
                r.fault.to_owned(),
                r.runs.to_string(),
                r.acquisitions.to_string(),
                if r.overlaps == 0 {
                    "0".into()
                } else {
                    format!("{} (≤ {:.0} ms)", r.overlaps, r.overlap_ms_max)
                },
                format!("**{}**", r.stale_writes_accepted),
                r.stale_writes_rejected.to_string(),
                match r.lost_late {
                    0 => format!("{} / {}", r.lost_signalled, r.lost_not_signalled),
                    late => format!("{} / {} ({late} told late)", r.lost_signalled, r.lost_not_signalled),
                },
                f(r.lost_ms_p50),
                format!("{} ({} ms TTL)", f(r.takeover_ms_p50), r.ttl_ms),
                r.token_regressions.to_string(),
                r.leftovers.to_string(),
            ]
        })
        .collect()
}

const FAULT_HEADER: &[&str] = &[
    "target",
    "fault",
    "runs",
    "grants",
    "overlaps",
    "stale writes accepted",
    "stale writes rejected",
    "holder told / not told",
    "told after (ms, p50)",
    "next holder after (ms, p50)",
    "tokens backwards",
    "leftovers",
];

/// The semaphore, read-write lock and election rows, and what each part's register checks.
fn primitives(out: &mut String, r: &Report) {
    if r.primitives.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Semaphores, read-write locks and elections under the faults\n");
    let _ = writeln!(
        out,
        "The same faults, with the workers contending for the other primitives, each writing to the \
         register under its part's rule (`chaos/src/register.rs`). **Semaphore** of {permits} permits: \
         a write is accepted only if its token is among the {permits} highest of the holders that \
         have written and not left (a holder leaves the register before it gives its permit back), \
         so never more than {permits} holders' writes are accepted at once, the newest ones; an \
         *overlap* is a grant while {permits} others are inside. The tokens of a semaphore do not say \
         which permit a holder has, so the register cannot tell a stale permit from a live one \
         older than it: a live holder can be refused (a rejected write, not a broken promise) when \
         a killed holder's token is above its own. **Read-write lock** (even workers read, odd \
         ones write): a writer's write must be at least every token accepted, a reader's at least \
         every writer's, so no reader admitted before a writer writes after the writer did; an \
         overlap is a writer granted while anyone is inside, or a reader while a writer is. \
         **Election**: the leader's term is its token, under the mutex's rule: a deposed \
         leader's write is refused, terms only grow. Tokens backwards: an exclusive grant below \
         an earlier grant's, a shared one below that of a section that ended before it began. \
         The Redis quorum serves mutexes only.{quick}\n",
        permits = crate::primitive::PERMITS,
        quick = if r.machine.quick {
            " This quick run: a semaphore on Redis, a read-write lock on etcd, an election on \
             ZooKeeper, each with a pause; `scripts/chaos` runs every primitive on every target \
             with every fault."
        } else {
            ""
        }
    );
    let rows: Vec<&Row> = r.primitives.iter().collect();
    let mut header = vec!["primitive"];
    header.extend_from_slice(FAULT_HEADER);
    let body = fault_rows(&rows)
        .into_iter()
        .zip(&rows)
        .map(|(mut cells, row)| {
            cells.insert(0, row.primitive.to_owned());
            cells
        })
        .collect();
    table(out, &header, body);
}

/// What a Redis failover does to a held lock, with and without replica confirmation: the rows
/// of the failover faults on Sentinel and Cluster, and how to read them.
fn redis_failover(out: &mut String, r: &Report) {
    let rows: Vec<&Row> = r
        .results
        .iter()
        .filter(|row| {
            row.backend == "redis"
                && (row.topology.starts_with("sentinel") || row.topology.starts_with("cluster"))
                && matches!(row.fault.as_str(), "leader-kill" | "failover" | "lag-failover")
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## Redis failover: what replica confirmation buys
"
    );
    let _ = writeln!(
        out,
        "Redis replicates asynchronously: a master that acknowledged a lock (or its renewal) can fail \
         before its replica saw it, and the promoted replica then grants the lock to someone else while \
         the first holder still believes it holds it. *Overlaps* below are such double grants; *not \
         told* are holders overtaken without `lost()` firing. With `min_replicas=1` a grant or renewal \
         counts only once a replica acknowledged it (`WAIT`), so the promoted replica knows every lease \
         its holder believes in: a holder keeps its lock through the failover or is told it lost it \
         before anyone else can get it (a broken promise otherwise).\n"
    );
    table(out, FAULT_HEADER, fault_rows(&rows));
    let _ = writeln!(
        out,
        "How to read it: without `min_replicas`, Redis Sentinel and Cluster are as safe as the \
         replication lag is short — fine for efficiency locks (a duplicate run of a job is harmless), \
         not for correctness locks unless the protected resource checks fencing tokens. With \
         `min_replicas=1` (every replica, on a master with one) a failover cannot silently hand a held \
         lock to another holder; it costs one `WAIT` round trip per grant and per renewal batch (see \
         `docs/comparison.md`), and while no replica answers nothing can be granted or renewed (holders \
         are told they lost their locks when their leases run out). What no setting fixes: a master \
         and its replica that both lose their data at once (restart without persistence), and clock \
         jumps; `restart_delay` and fencing tokens cover the first.\n"
    );
}

/// How a merged report was made: one line per part.
fn parts(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "This run was made in {} parts (`scripts/chaos --sections ...`, each on the same \
         machine, with every server started afresh), merged with `lockchaos merge`:\n",
        r.machine.parts.len()
    );
    for (i, p) in r.machine.parts.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}. {} — commit `{}`, {:.0} s",
            i + 1,
            p.sections.join(", "),
            p.commit.as_deref().unwrap_or("unknown"),
            p.seconds
        );
    }
    out.push('\n');
}

/// The whole page.
pub fn page(r: &Report) -> String {
    let mut out = String::new();
    let m = &r.machine;
    let broken = r.broken_promises();
    let _ = writeln!(out, "# Reliability: locksmith under faults\n");
    let _ = writeln!(
        out,
        "Generated by `scripts/chaos{}` (the fault suite, `chaos/`): real worker **processes** take one \
         lock, write their fencing token to a **fenced register** (a Redis of its own that accepts a \
         write only if its token is at least the highest it has accepted), hold it 10–300 ms (three TTLs under a partition, a clock jump or a replicated failover), release — \
         while faults are injected into them and into the servers (and the same with semaphores, \
         read-write locks and elections). Re-run it with `scripts/chaos` (about five hours, or in parts: \
         see its help; this run's time is below) or `scripts/chaos --quick` (about 20 minutes); the figures below are from {}.\n",
        if m.quick { " --quick" } else { "" },
        if m.parts.len() > 1 {
            "the runs of the parts listed below, merged"
        } else {
            "one run"
        }
    );
    let _ = writeln!(
        out,
        "Machine: {} CPUs, {}; {}. Lease TTL {} ms on single servers (clusters: at least 2000 ms; \
         Redis Sentinel and Cluster: at least 4000 ms); {} workers per run; each fault injected {} \
         time(s), failovers on Redis Sentinel and Cluster {} times; {:.0} s in all.\n",
        m.cpus,
        m.os,
        m.servers.join(", "),
        m.ttl_ms,
        m.workers,
        m.repeats,
        m.failovers,
        m.seconds
    );
    if m.parts.len() > 1 {
        parts(&mut out, r);
    }
    if broken.is_empty() {
        let _ = writeln!(
            out,
            "**Verdict: every promise held.** No stale write was accepted anywhere, no fencing token went \
             backwards, no two holders overlapped without a fault, nothing was left on a server.\n"
        );
    } else {
        let _ = writeln!(out, "**Verdict: {} broken promise(s):**\n", broken.len());
        for b in &broken {
            let _ = writeln!(out, "- {b}");
        }
        out.push('\n');
    }

    promises(&mut out, r);

    let _ = writeln!(out, "## Faults\n");
    let _ = writeln!(
        out,
        "- **pause**: the holder's whole process group is stopped (`SIGSTOP`) for 2–3 TTLs, watchdog \
         and all, then resumed.\n- **kill**: the holder is killed (`SIGKILL`); a new worker takes its \
         place.\n- **partition**: the holder's traffic goes through a proxy of the suite's, which \
         freezes it both ways, one way, or cuts the connections, for 2 TTLs.\n- **restart**: the \
         server is stopped and started (Redis without persistence loses its data; etcd and ZooKeeper \
         keep theirs; on a cluster, one member).\n- **leader-kill**: the cluster's leader is killed \
         and started again a TTL later.\n- **minority-partition**: one follower is cut off from \
         everyone (its process stopped) for 2 TTLs.\n- **net-partition** (servers started with \
         `LOCKSMITH_BACKENDS_NETNS=1`: each member of the etcd cluster, the ZooKeeper ensemble and \
         the Sentinel set in a network namespace of its own): a real partition, blackhole routes \
         between one member and every other server while the clients still reach it and it keeps \
         serving them. On etcd and ZooKeeper the leader (even injections) or a follower (odd) is \
         cut off for 2 TTLs; on Sentinel the master, until the sentinels have promoted its replica \
         and a TTL more, then healed (it becomes the new master's replica).\n- On Redis Sentinel and Redis Cluster, **leader-kill** kills \
         the master that holds the lock (on a cluster: of the lock's slot), waits until the sentinels \
         or the cluster promote its replica, and starts it again (it comes back as the new master's \
         replica); **failover** is `SENTINEL FAILOVER`, with no server down; **lag-failover** (Sentinel) \
         stops the replica for 5/8 of a TTL while renewals reach the master alone, kills the master, \
         resumes the replica, which is promoted without those renewals, and starts the old master \
         again as its replica. `+confirm` targets use \
         `min_replicas=1`, the default on both since 2026-11-25 (the others opt out with \
         `min_replicas=0`).\n- On PostgreSQL's primary and synchronous standby (`postgres/ha`), **failover** \
         kills every process of the primary at once, promotes the standby, and makes the old \
         primary its standby again (the promoted primary's commits wait until it streams); \
         **lag-failover** stops the standby for 5/8 of a TTL first (the primary's commits, \
         renewals included, wait for it meanwhile), then fails over; the other faults are the \
         single server's.\n- On MariaDB's primary and semi-synchronous replica (`mysql/ha`, a URL \
         that names both, `mysql://…@ha1,ha2/…`, with no proxy: the client connects to the one \
         that takes writes, and `replication=sync`, the default with several hosts, refuses a \
         primary without semi-synchronous replication), **failover** kills the primary (its \
         connections end), promotes the replica once it applied what it received, and makes the \
         old primary its replica again from nothing (the promoted primary's commits wait until it \
         acknowledges); **lag-failover** stops the replica for 5/8 of a TTL first; the other \
         faults are the single server's (`mysql/single`).\n- **clock-jump** (servers started with `LOCKSMITH_BACKENDS_CLOCKS=1`: \
         the single Redis, the Redis quorum's masters and the standalone ZooKeeper under an \
         `LD_PRELOAD` clock shim, `scripts/backends.d/clockshift.c`): the server's wall clock \
         steps +10 s, −10 s, +1 h or −1 h (in turn) while the lock is held, stays there for 2 TTLs \
         and steps back to the true time; on the quorum, one master's. etcd is not stepped (a Go \
         binary reads the clock through the vDSO, out of a shim's reach), nor PostgreSQL here \
         (`backend-postgres/tests/clock.rs` steps it), nor a client (`cli/tests/cli_clock.rs`); \
         see locksmith-redis's docs, \"Clock jumps\".\n"
    );
    let _ = writeln!(
        out,
        "Columns: *overlaps* are pairs of critical sections (acquire returned → work done or `lost()`) \
         of different processes that intersect on the machine's one monotonic clock. *Stale writes \
         accepted* are writes the register accepted after it had accepted a write of a later holder \
         (**must be 0**). *Stale writes rejected* are fencing at work. *Holder told / not told*: of the \
         faults that struck a holder, those whose `lost()` fired, and those whose holder was overtaken \
         and never heard; *told late*: fired only after another holder had entered (where a holder \
         must be told first, a broken promise). *Next holder after*: from the fault to the next grant of another process.\n"
    );
    let rows: Vec<&Row> = r.results.iter().collect();
    table(&mut out, FAULT_HEADER, fault_rows(&rows));
    redis_failover(&mut out, r);
    primitives(&mut out, r);

    if !r.guarded.is_empty() {
        let _ = writeln!(out, "## Guarded writes: the store refuses the stale holder\n");
        let _ = writeln!(
            out,
            "The same faults, with the workers writing through guarded writes (`guard.guarded()`, \
             `docs/fencing.md`) instead of to the register: each appends its token to a log kept in \
             the coordination store itself, with a compare-and-set that the server commits only \
             while the writer's lease holds. The workers write **blind**, after their whole hold \
             whether or not `lost()` fired (as the self-check's do), so every write of a holder \
             paused past its lease reaches the store: *stale writes rejected* are the store's \
             refusals (or the guard's own, when it already knew), and *stale writes accepted* \
             (**must be 0**) are writes in the store's log after a later holder's. Targets: every \
             one with guarded writes (all but the Redis quorum).\n"
        );
        let rows: Vec<&Row> = r.guarded.iter().collect();
        table(&mut out, FAULT_HEADER, fault_rows(&rows));
    }

    if !r.fenced.is_empty() {
        let _ = writeln!(
            out,
            "## A fenced store: storage outside the lock service refuses the stale holder
"
        );
        let _ = writeln!(
            out,
            "The same faults, with the workers writing to storage outside the lock service as \
             users are told to (`locksmith-fence`, `docs/fencing.md`): each write is one \
             PostgreSQL transaction that admits the writer's token with `Fence::admit` (refused \
             below the highest token committed) and appends a row to a log table. The workers \
             write **blind**, so every write of a holder paused past its lease reaches the store; \
             *stale writes rejected* are the fence's refusals and *stale writes accepted* (**must \
             be 0**) are rows logged after a later holder's. The fence needs the token alone, so \
             `file://` and the Redis quorum are here too; the quick run pauses holders on the \
             single-server targets and the quorum.\n"
        );
        let rows: Vec<&Row> = r.fenced.iter().collect();
        table(&mut out, FAULT_HEADER, fault_rows(&rows));
    }

    if let Some(s) = &r.self_check {
        let _ = writeln!(out, "## Self-check: the suite catches a broken setup\n");
        let _ = writeln!(
            out,
            "The same run against {}: {} stale writes accepted, so the suite {}.\n",
            s.variant,
            s.row.stale_writes_accepted,
            if s.caught {
                "flagged it (as it must)"
            } else {
                "**did not flag it** (a blind checker)"
            }
        );
        table(&mut out, FAULT_HEADER, fault_rows(&[&s.row]));
    }

    if !r.leaks.is_empty() {
        let _ = writeln!(out, "## Leaks\n");
        let _ = writeln!(
            out,
            "Waiters that went away mid-wait: acquires cancelled at random points (the future dropped \
             or the builder's timeout, half of them while the request that queues them is in flight), \
             from ten connections; and waiter processes killed with `SIGKILL`. Then the holder \
             releases; entries left once a TTL passed must be 0, and a fresh `try_acquire` must get \
             the lock at once.\n"
        );
        let rows = r
            .leaks
            .iter()
            .map(|l| {
                vec![
                    l.backend.to_owned(),
                    l.kind.to_owned(),
                    l.waiters.to_string(),
                    format!("**{}**", l.stray_entries),
                    l.free_at_once.to_string(),
                    format!("{:.1}", l.seconds),
                    l.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "backend",
                "waiters",
                "how many",
                "entries left",
                "free at once",
                "s",
                "error",
            ],
            rows,
        );
    }
    if !r.load.is_empty() {
        let _ = writeln!(out, "## Load: many waiters on one lock\n");
        let _ = writeln!(
            out,
            "Waiters queue one after another (each seen queued before the next starts), on a \
             connection each (`own`) or all on one (`shared`); the holder releases and each takes \
             the lock and releases it at once. *Requests per handover* counts the server's requests \
             (server-wide), waiters' heartbeats and keep-alives included; on PostgreSQL, its \
             transactions that wrote (a step, a renewal, a heartbeat).\n"
        );
        let rows = r
            .load
            .iter()
            .map(|l| {
                vec![
                    l.backend.to_owned(),
                    l.connections.to_owned(),
                    l.waiters.to_string(),
                    l.served.to_string(),
                    l.fifo_inversions.to_string(),
                    format!("{:.0}", l.handovers_per_s),
                    l.requests_per_handover
                        .map_or_else(|| "–".into(), |v| format!("{v:.1}")),
                    format!("{:.0} → {:.0}", l.rss_mib.0, l.rss_mib.1),
                    l.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "backend",
                "connections",
                "waiters",
                "served",
                "out of order",
                "handovers/s",
                "requests/handover",
                "client RSS MiB",
                "error",
            ],
            rows,
        );
    }
    if !r.soak.is_empty() {
        let _ = writeln!(out, "## Soak: many locks held for long\n");
        let _ = writeln!(
            out,
            "One process holds the locks of every backend at once (taken one backend after the \
             other, with {:?} leases). *Requests/min* is the server's (server-wide) in the first and \
             the last sampling interval: renewal traffic must stay flat. RSS is the one driver \
             process with all soaks in it.\n",
            super::SOAK_TTL
        );
        let rows = r
            .soak
            .iter()
            .map(|s| {
                vec![
                    s.backend.to_owned(),
                    s.locks.to_string(),
                    format!("{:.0}", s.minutes),
                    format!("**{}**", s.lost),
                    format!("{:.1}", s.acquire_seconds),
                    s.requests_per_min
                        .map_or_else(|| "–".into(), |(a, b)| format!("{a:.0} → {b:.0}")),
                    format!("{:.0} → {:.0}", s.rss_mib.0, s.rss_mib.1),
                    s.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "backend",
                "locks",
                "minutes",
                "lost",
                "acquire s",
                "requests/min",
                "RSS MiB",
                "error",
            ],
            rows,
        );
    }
    if !r.bad_input.is_empty() {
        let _ = writeln!(out, "## Bad input\n");
        let _ = writeln!(
            out,
            "Every bad input tried, with the error it got and how long it took. None may panic, \
             succeed, hang or leave anything on the server.\n"
        );
        let rows = r
            .bad_input
            .iter()
            .map(|b| {
                vec![
                    b.backend.to_owned(),
                    b.case.clone(),
                    format!("`{}`", b.input.replace('|', "\\|").replace('`', "'")),
                    b.outcome.clone(),
                    b.message.replace('|', "\\|"),
                    format!("{:.0}", b.ms),
                ]
            })
            .collect();
        table(&mut out, &["backend", "case", "input", "error", "message", "ms"], rows);
    }
    if !r.operator_faults.is_empty() {
        let _ = writeln!(out, "## Operator faults\n");
        let _ = writeln!(
            out,
            "What operators do to servers. A misconfiguration must be refused at once (`Denied`, \
             exit 5), never retried; a server out of space, connections or memory must answer an \
             acquire with an error that names what ran out, within its timeout, while a lock held \
             before is kept (or its holder told) and nobody else gets it. Each server is freed \
             again afterwards.\n"
        );
        let rows = r
            .operator_faults
            .iter()
            .map(|f| {
                vec![
                    f.backend.clone(),
                    f.case.clone(),
                    f.expected.replace('|', "\\|"),
                    f.outcome.clone(),
                    f.message.replace('|', "\\|"),
                    format!("{:.0}", f.ms),
                    f.held.clone().unwrap_or_else(|| "-".into()),
                    if f.ok { "yes" } else { "**no**" }.into(),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "backend",
                "fault",
                "expected",
                "error",
                "message",
                "ms",
                "held lock",
                "held",
            ],
            rows,
        );
    }
    if !r.notes.is_empty() {
        let _ = writeln!(out, "## Notes\n");
        for n in &r.notes {
            let _ = writeln!(out, "- {n}");
        }
        out.push('\n');
    }
    out
}

/// The prose: what a lock can and cannot promise, with this run's figures behind it.
fn promises(out: &mut String, r: &Report) {
    let sum =
        |fault: &str, f: fn(&Row) -> usize| -> usize { r.results.iter().filter(|x| x.fault == fault).map(f).sum() };
    let pauses = sum("pause", |x| x.runs);
    let pause_overlaps = sum("pause", |x| x.overlaps);
    let rejected: usize = r.results.iter().map(|x| x.stale_writes_rejected).sum();
    let accepted: usize = r.results.iter().map(|x| x.stale_writes_accepted).sum();
    let told = sum("partition", |x| x.lost_signalled);
    let partitions = sum("partition", |x| x.runs);
    let _ = writeln!(out, "## What a lock can and cannot promise\n");
    let _ = writeln!(
        out,
        "- **A paused process can outlive its lease.** In {pauses} pauses of 2–3 TTLs the paused holder \
         was still inside its critical section when the next holder entered {pause_overlaps} time(s): \
         while a process is stopped, nothing in it — its watchdog included — can run to tell it, and \
         the server rightly hands the lock on once the lease expires. No lock can prevent this \
         (Kleppmann; Jepsen's etcd 3.4.3 analysis).\n\
         - **Fencing is what keeps storage safe.** Across the whole run the register rejected \
         {rejected} write(s) of holders whose lock had moved on, and accepted **{accepted}** out of \
         order: pass `guard.fencing_token()` to your storage and have it refuse a token below the \
         highest it has seen.\n\
         - **A holder that can still run is told before anyone else can get the lock.** When the \
         holder's traffic was cut ({partitions} partition(s)), its `lost()` fired in {told} case(s), \
         before the server could expire the lease (the watchdog gives up a TTL/10 early); the \
         *holder told / not told* column shows this for every fault.\n\
         - **Tokens never go backwards**, not even after a Redis restart that lost every key \
         (`fence_floor=time`, and no grant for `restart_delay` after the restart).\n"
    );
    let _ = writeln!(out, "### Which backend when mutual exclusion must survive failover\n");
    let _ = writeln!(
        out,
        "- **etcd (a cluster)** and **ZooKeeper (an ensemble)**: the lock lives in a replicated, \
         linearizable store; a leader change keeps it (etcd extends leases across an election), and a \
         minority that is cut off cannot grant anything. Prefer these when the lock must hold \
         through a server failure.\n\
         - **Redis, one server**: a restart without persistence loses the lock; locksmith then grants \
         nothing for `restart_delay` so the old holder is told first, and tokens keep growing. Safe \
         with fencing, at the price of that pause after every restart. A crash that reloads a \
         snapshot older than the last grant (RDB save points, AOF `everysec`) keeps the lock's \
         counter, and the lock is granted at once: only fencing covers that (or `appendfsync \
         always`).\n\
         - **Redis, a quorum of independent masters** (Redlock): survives a minority of masters going \
         down or restarting (a restarted master grants nothing for `restart_delay`); it counts on \
         clocks and on no process pausing past its lease, so use fencing.\n"
    );
}

/// Writes `rows` as a Markdown table (helper for the page).
fn table(out: &mut String, header: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
    for r in rows {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    out.push('\n');
}
