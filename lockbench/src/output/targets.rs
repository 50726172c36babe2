//! The targets, checked against a report. Every target is reported as met, not met (with
//! the figures that miss it) or not measured (with why), never silently dropped.

use crate::model::{Record, Report};

/// The verdict on one target.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Met on everything measured.
    Met,
    /// Missed; the misses, one per line.
    NotMet(Vec<String>),
    /// Nothing to judge it on.
    NotMeasured(String),
}

/// One target with its verdict.
#[derive(Clone, Debug)]
pub struct Target {
    /// The target as the issue states it.
    pub statement: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// What it was judged on.
    pub judged_on: Vec<String>,
}

/// Handover p50 targets per backend, microseconds.
pub const HANDOVER_TARGET_US: &[(&str, f64)] = &[("redis", 300.0), ("etcd", 1500.0), ("zk", 1000.0)];
const SERVERS: &[&str] = &["etcd", "zk", "redis"];

/// Checks every target.
pub fn check(report: &Report) -> Vec<Target> {
    vec![
        uncontended(report),
        handover(report),
        herd(report),
        scale(report),
        contended(report),
    ]
}

fn rows<'a>(report: &'a Report, system: &'a str, workload: &'a str) -> impl Iterator<Item = &'a Record> + 'a {
    report
        .results
        .iter()
        .filter(move |r| r.system == system && r.workload == workload)
}

fn verdict(judged: &[String], misses: Vec<String>, what: &str) -> Verdict {
    if judged.is_empty() {
        Verdict::NotMeasured(format!("no {what} rows in this run"))
    } else if misses.is_empty() {
        Verdict::Met
    } else {
        Verdict::NotMet(misses)
    }
}

fn uncontended(report: &Report) -> Target {
    let (mut judged, mut misses) = (Vec::new(), Vec::new());
    let mut missing = Vec::new();
    for r in rows(report, "locksmith", "uncontended").filter(|r| SERVERS.contains(&r.backend.as_str())) {
        match r.ratio_to_floor {
            Some(ratio) => {
                judged.push(format!("{}: {ratio:.2}× floor", r.backend));
                if ratio > 1.10 {
                    misses.push(format!("{}: {ratio:.2}× the raw floor (target ≤ 1.10×)", r.backend));
                }
            }
            None => missing.push(format!("{}: no floor row", r.backend)),
        }
        let peers = report
            .results
            .iter()
            .filter(|p| p.system != "locksmith" && p.system != "floor" && p.same_measurement(r));
        for p in peers {
            if let (Some(mine), Some(theirs)) = (r.p50_us, p.p50_us) {
                judged.push(format!("{}: {:.2}× {}", r.backend, mine / theirs, p.system));
                if mine >= theirs {
                    misses.push(format!(
                        "{}: p50 {mine:.0} µs, not faster than {} ({theirs:.0} µs)",
                        r.backend, p.system
                    ));
                }
            }
        }
    }
    judged.extend(missing);
    Target {
        statement: "uncontended: ≤ 1.10 × the raw floor on every backend, and faster than each peer on its backend",
        verdict: verdict(&judged, misses, "locksmith uncontended on a server backend"),
        judged_on: judged,
    }
}

fn handover(report: &Report) -> Target {
    let (mut judged, mut misses) = (Vec::new(), Vec::new());
    for r in rows(report, "locksmith", "handover") {
        let Some(&(_, limit)) = HANDOVER_TARGET_US.iter().find(|(b, _)| *b == r.backend) else {
            continue;
        };
        let (Some(p50), Some(blocked)) = (r.p50_us, r.param_u64("blocked_ms")) else {
            continue;
        };
        judged.push(format!("{} blocked {blocked} ms: {p50:.0} µs", r.backend));
        if p50 > limit {
            misses.push(format!(
                "{} blocked {blocked} ms: p50 {p50:.0} µs (target ≤ {limit:.0} µs)",
                r.backend
            ));
        }
    }
    Target {
        statement: "handover: Redis ≤ 0.3 ms, etcd ≤ 1.5 ms, ZooKeeper ≤ 1 ms at p50, at every waiter-blocked time",
        verdict: verdict(&judged, misses, "locksmith handover on a server backend"),
        judged_on: judged,
    }
}

fn herd(report: &Report) -> Target {
    let (mut judged, mut misses) = (Vec::new(), Vec::new());
    for r in rows(report, "locksmith", "herd") {
        let Some(n) = r.requests_per_handover else { continue };
        judged.push(format!("{}: {n:.2} requests/handover", r.backend));
        if n > 3.0 {
            misses.push(format!(
                "{}: {n:.2} server requests per handover (target ≤ 3)",
                r.backend
            ));
        }
    }
    Target {
        statement: "herd: ≤ 3 server requests per handover with 100 waiters, on every backend",
        verdict: verdict(&judged, misses, "locksmith herd"),
        judged_on: judged,
    }
}

fn scale(report: &Report) -> Target {
    let (mut judged, mut misses) = (Vec::new(), Vec::new());
    for backend in SERVERS {
        let mut pts: Vec<&Record> = rows(report, "locksmith", "scale")
            .filter(|r| r.backend == *backend)
            .collect();
        pts.sort_by_key(|r| r.param_u64("locks"));
        let (Some(small), Some(big)) = (pts.first(), pts.last()) else {
            continue;
        };
        let (Some(rs), Some(rb)) = (small.renewal_requests_per_s, big.renewal_requests_per_s) else {
            continue;
        };
        let (ns, nb) = (
            small.param_u64("locks").unwrap_or(0),
            big.param_u64("locks").unwrap_or(0),
        );
        let ticks = big
            .params
            .get("measured_renew_ticks_per_s")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        let calls = big.params.get("measured_backend_calls_per_s").and_then(|v| v.as_f64());
        judged.push(format!(
            "{backend}: {rs:.2}/s at {ns} locks, {rb:.2}/s at {nb} locks ({ticks:.2} ticks/s)"
        ));
        for p in &pts {
            let lost = p.param_u64("measured_lost").unwrap_or(0);
            if lost > 0 {
                misses.push(format!(
                    "{backend}: {lost} of {} held locks were lost during the window",
                    p.param_u64("locks").unwrap_or(0)
                ));
            }
        }
        if *backend == "redis" {
            // The target is about round trips; the server counts requests, and a pipelined
            // batch is one round trip of many requests. The watchdog's calls into the backend
            // (one pipelined round trip each) give the round trips.
            match calls {
                Some(c) if c > ticks * 1.5 + 0.5 => misses.push(format!(
                    "redis: {c:.2} renewal calls/s at {nb} locks for {ticks:.2} ticks/s (target: one batched round trip per tick)"
                )),
                Some(c) => judged.push(format!("redis: {c:.2} renewal round trips/s at {nb} locks (client-side count; the server received {rb:.0} requests/s in them)")),
                None => misses.push("redis: no client-side count of renewal calls".into()),
            }
        } else if nb > ns && rb > rs * 1.5 + 1.0 {
            misses.push(format!("{backend}: {rs:.2}/s at {ns} locks grows to {rb:.2}/s at {nb} locks (target: independent of the count)"));
        }
    }
    Target {
        statement: "scale: renewal traffic independent of the number of held locks on etcd and ZooKeeper, one batched round trip per tick on Redis",
        verdict: verdict(&judged, misses, "locksmith scale on a server backend"),
        judged_on: judged,
    }
}

fn contended(report: &Report) -> Target {
    let (mut judged, mut misses) = (Vec::new(), Vec::new());
    let checked = ["contended", "semaphore", "rwlock"];
    for r in report.results.iter().filter(|r| checked.contains(&r.workload.as_str())) {
        let v = r.violations.unwrap_or(0);
        judged.push(format!(
            "{} {} {} {} clients: {v}",
            r.system,
            r.backend,
            r.workload,
            r.param_u64("clients").unwrap_or(0)
        ));
        if v > 0 {
            misses.push(format!(
                "{} {} on {} with {} clients: {v} violations",
                r.system,
                r.workload,
                r.backend,
                r.param_u64("clients").unwrap_or(0)
            ));
        }
    }
    Target {
        statement: "contended (mutex, semaphore, read-write lock): 0 violations always",
        verdict: verdict(&judged, misses, "contended"),
        judged_on: judged,
    }
}
