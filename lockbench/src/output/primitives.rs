//! The comparison document's section on semaphores, read-write locks and elections: throughput,
//! handovers and failover, per backend (locksmith only: the peer libraries have none of them on
//! most backends).

use std::fmt::Write;

use super::{cell, find, BACKENDS};
use crate::model::Report;

/// The section, if the run measured any of them.
pub fn section(s: &mut String, report: &Report) {
    let measured = |w: &str| {
        report
            .results
            .iter()
            .any(|r| r.system == "locksmith" && r.workload == w)
    };
    if !["semaphore", "rwlock", "election-resign"].iter().any(|w| measured(w)) {
        return;
    }
    let _ = writeln!(s, "## Semaphores, read-write locks and elections\n");
    let _ = writeln!(
        s,
        "Each is one FIFO queue per name, granted by one rule on every backend (`docs/design.md`). \
         Throughput: N clients, one connection each, take and give back the lock as fast as they can \
         (the semaphore has 4 permits; one read-write operation in ten is a write). Handover: the \
         time from a release to the waiter's (the last of 4 blocked readers') acquire returning. \
         Failover: the leader's process is killed; the time until the next candidate leads, bounded \
         below by the lease TTL.\n"
    );
    let clients = clients(report);
    let header: Vec<String> = clients.iter().map(|c| format!("{c} clients /s")).collect();
    let _ = writeln!(
        s,
        "| backend | kind | {} | violations | handover p50 µs |",
        header.join(" | ")
    );
    let _ = writeln!(s, "|---|---|{}---|---|", "---|".repeat(clients.len()));
    for &b in BACKENDS {
        for (kind, workload, handover) in [
            ("semaphore (4)", "semaphore", "semaphore-handover"),
            ("read-write (10% writes)", "rwlock", "rwlock-handover"),
        ] {
            let rows: Vec<_> = report
                .results
                .iter()
                .filter(|r| r.system == "locksmith" && r.backend == b && r.workload == workload)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let per_client: Vec<String> = clients
                .iter()
                .map(|c| {
                    cell(
                        rows.iter()
                            .find(|r| r.param_u64("clients") == Some(*c))
                            .and_then(|r| r.throughput_per_s),
                        0,
                    )
                })
                .collect();
            let violations: u64 = rows.iter().filter_map(|r| r.violations).sum();
            let hand = find(report, "locksmith", b, handover, None).and_then(|r| r.p50_us);
            let _ = writeln!(
                s,
                "| {b} | {kind} | {} | {violations} | {} |",
                per_client.join(" | "),
                cell(hand, 0)
            );
        }
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "| backend | election: resign → next leader p50 µs | leader killed → next leader ms (TTL) |"
    );
    let _ = writeln!(s, "|---|---|---|");
    for &b in BACKENDS {
        let resign = find(report, "locksmith", b, "election-resign", None).and_then(|r| r.p50_us);
        let failover = find(report, "locksmith", b, "election-failover", None);
        if resign.is_none() && failover.is_none() {
            continue;
        }
        let failover = failover.map_or_else(
            || "—".to_owned(),
            |r| format!("{} ({} ms)", cell(r.takeover_ms, 0), r.param_u64("ttl_ms").unwrap_or(0)),
        );
        let _ = writeln!(s, "| {b} | {} | {failover} |", cell(resign, 0));
    }
    s.push('\n');
}

/// The client counts of the throughput rows, in order.
fn clients(report: &Report) -> Vec<u64> {
    let mut out: Vec<u64> = report
        .results
        .iter()
        .filter(|r| r.system == "locksmith" && (r.workload == "semaphore" || r.workload == "rwlock"))
        .filter_map(|r| r.param_u64("clients"))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}
