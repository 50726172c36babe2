//! What the variants of locksmith's connection cost, measured beside plain locksmith in the same
//! run: TLS with authentication, and Redis Sentinel, Cluster and replica confirmation.

use std::fmt::Write;

use super::{find, handover_p50, BACKENDS};
use crate::model::Report;

/// What TLS (and authentication) costs: locksmith on each backend's secured server beside the
/// plain one, measured in the same run.
pub fn tls_cost(s: &mut String, report: &Report) {
    let rows: Vec<String> = BACKENDS
        .iter()
        .filter_map(|b| {
            let plain = find(report, "locksmith", b, "uncontended", None)?.p50_us?;
            let tls = find(report, "locksmith+tls", b, "uncontended", None)?.p50_us?;
            let hand = match (
                handover_p50(report, "locksmith", b),
                handover_p50(report, "locksmith+tls", b),
            ) {
                (Some(p), Some(t)) => format!("{p:.0} → {t:.0}"),
                _ => "—".into(),
            };
            Some(format!("| {b} | {plain:.0} → {tls:.0} | {:.2} | {hand} |", tls / plain))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "### What TLS costs
"
    );
    let _ = writeln!(
        s,
        "locksmith on each backend's secured server (`scripts/backends`: mutual TLS with rustls, and a user with a password) beside the plain server, in the same run (`locksmith+tls` rows below). The connection's handshake is paid once, at connect; what remains is encryption per request.\n"
    );
    let _ = writeln!(
        s,
        "| backend | uncontended p50 µs, plain → TLS | × | handover p50 µs (shortest wait), plain → TLS |"
    );
    let _ = writeln!(s, "|---|---|---|---|");
    for r in rows {
        let _ = writeln!(s, "{r}");
    }
    s.push('\n');
}

/// What Redis Sentinel and Cluster cost, and replica confirmation (`min_replicas=1`, one `WAIT`
/// per grant and per renewal batch) on each, beside locksmith on one Redis server.
pub fn redis_topologies(s: &mut String, report: &Report) {
    let Some(single) = find(report, "locksmith", "redis", "uncontended", None).and_then(|r| r.p50_us) else {
        return;
    };
    let variants = [
        (
            "locksmith+plain",
            "one server, `layout=plain` (redis-py's and redsync's keys)",
        ),
        (
            "locksmith+sentinel",
            "Sentinel (the master the sentinels name), `min_replicas=0`",
        ),
        ("locksmith+sentinel+wait", "Sentinel, `min_replicas=1` (the default)"),
        ("locksmith+cluster", "Cluster (3 masters), `min_replicas=0`"),
        ("locksmith+cluster+wait", "Cluster, `min_replicas=1` (the default)"),
    ];
    let rows: Vec<String> = variants
        .iter()
        .filter_map(|(system, label)| {
            let p50 = find(report, system, "redis", "uncontended", None)?.p50_us?;
            let hand = handover_p50(report, system, "redis").map_or_else(|| "—".into(), |h| format!("{h:.0}"));
            Some(format!("| {label} | {p50:.0} | {:.2} | {hand} |", p50 / single))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "### What the plain layout, Redis Sentinel, Cluster and replica confirmation cost\n"
    );
    let _ = writeln!(
        s,
        "locksmith on the test servers' Redis Sentinel (a master, a replica, three sentinels) and Redis \
         Cluster (three masters, each with a replica) beside one Redis server, in the same run. \
         `min_replicas=1` waits for a replica to acknowledge every grant and renewal batch (`WAIT`) \
         before trusting it, so that a failover cannot hand a held lock to someone else (see \
         `docs/reliability.md`, \"Redis failover\"): its cost is that round trip to the replica. It \
         is the default on Sentinel and Cluster; `min_replicas=0` opts out. `layout=plain` keeps the \
         lock under its raw name, as redis-py and redsync do, so that they and locksmith share it \
         (see `docs/migration.md`).\n"
    );
    let hand = handover_p50(report, "locksmith", "redis").map_or_else(|| "—".into(), |h| format!("{h:.0}"));
    let _ = writeln!(
        s,
        "| redis topology or layout | uncontended p50 µs | × one server | handover p50 µs (shortest wait) |"
    );
    let _ = writeln!(s, "|---|---|---|---|");
    let _ = writeln!(s, "| one server | {single:.0} | 1.00 | {hand} |");
    for r in rows {
        let _ = writeln!(s, "{r}");
    }
    s.push('\n');
}
