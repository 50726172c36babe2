//! The result model: one [`Record`] per measured (system, backend, workload, params), and the
//! [`Report`] that the output formats write. Serialises to the `lockbench/1` JSON schema.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The schema tag written at the top of every JSON report.
pub const SCHEMA: &str = "lockbench/1";

/// The machine the run was made on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// Logical cores available to the process.
    pub cores: usize,
    /// Free text: what else was running, which servers, which build.
    pub note: String,
}

/// One measured row. Fields that do not apply to a workload are `None` and omitted from JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// `locksmith`, a variant of it (`locksmith+tls` over a secured server; on Redis
    /// `locksmith+sentinel`, `locksmith+cluster`, and `…+wait` with `min_replicas=1`), `floor`,
    /// `rslock`, `etcd-lock-rpc` or `zk-recipe`.
    pub system: String,
    /// `mem`, `file`, `etcd`, `zk` or `redis`.
    pub backend: String,
    /// `uncontended`, `handover`, `contended`, `herd`, `takeover`, `scale`, `cli`, or a primitive's
    /// workload.
    pub workload: String,
    /// The workload's parameters (blocked_ms, clients, waiters, ttl_ms, locks, ...).
    pub params: Map<String, Value>,
    /// How many operations were measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops: Option<u64>,
    /// Median latency, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<f64>,
    /// 99th percentile latency, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// Operations (acquire+release cycles) per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput_per_s: Option<f64>,
    /// Mutual-exclusion violations seen (must be 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violations: Option<u64>,
    /// Server requests per handover, read from the server's own counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_handover: Option<f64>,
    /// Time from SIGKILL of the holder until a waiter holds the lock, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takeover_ms: Option<f64>,
    /// Renewal requests per second received by the server while holding the locks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_requests_per_s: Option<f64>,
    /// Resident memory per held lock, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_lock: Option<f64>,
    /// This row's median divided by the raw floor's median for the same workload and params.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_floor: Option<f64>,
    /// On locksmith's rows: this row's median divided by the peer library's median for the same
    /// workload and params on the same backend (below 1: locksmith is faster). The peer's system
    /// name is in `params.measured_peer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_peer: Option<f64>,
    /// Raw latency samples (microseconds), for the charts; never serialised.
    #[serde(skip)]
    pub samples_us: Vec<f64>,
}

impl Record {
    /// An empty row for `system` on `backend` running `workload`.
    pub fn new(system: &str, backend: &str, workload: &str) -> Self {
        Record {
            system: system.into(),
            backend: backend.into(),
            workload: workload.into(),
            ..Default::default()
        }
    }

    /// Adds one parameter.
    pub fn param(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.params.insert(key.into(), value.into());
        self
    }

    /// An integer parameter, if present.
    pub fn param_u64(&self, key: &str) -> Option<u64> {
        self.params.get(key).and_then(Value::as_u64)
    }

    /// Whether `other` measured the same workload with the same parameters (on any system).
    /// Params named `measured_*` are results, not inputs, and are ignored.
    pub fn same_measurement(&self, other: &Record) -> bool {
        let inputs = |r: &Record| -> Map<String, Value> {
            r.params
                .iter()
                .filter(|(k, _)| !k.starts_with("measured_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        self.backend == other.backend && self.workload == other.workload && inputs(self) == inputs(other)
    }
}

/// A whole run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Where it ran.
    pub machine: Machine,
    /// Every measured row.
    pub results: Vec<Record>,
    /// What was skipped and why (a backend not built or not reachable, a workload that does not
    /// apply), and other caveats of this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// Fills `ratio_to_floor` on every non-floor row that has a floor row with the same
    /// measurement and a median on both sides, and `ratio_to_peer` (with `params.measured_peer`)
    /// on every locksmith row that has a peer-library row likewise.
    pub fn compute_ratios(&mut self) {
        let peers: Vec<Record> = self
            .results
            .iter()
            .filter(|r| is_peer_library(&r.system))
            .cloned()
            .collect();
        for r in self.results.iter_mut().filter(|r| r.system == "locksmith") {
            let Some(mine) = r.p50_us else { continue };
            let peer = peers
                .iter()
                .find(|p| p.same_measurement(r) && p.p50_us.is_some_and(|b| b > 0.0));
            if let Some((p, base)) = peer.and_then(|p| Some((p, p.p50_us?))) {
                r.ratio_to_peer = Some(round3(mine / base));
                r.params.insert("measured_peer".into(), p.system.clone().into());
            }
        }
        let floors: Vec<Record> = self.results.iter().filter(|r| r.system == "floor").cloned().collect();
        for r in self.results.iter_mut().filter(|r| r.system != "floor") {
            let floor = floors.iter().find(|f| f.same_measurement(r));
            if let (Some(f), Some(mine)) = (floor, r.p50_us) {
                if let Some(base) = f.p50_us.filter(|b| *b > 0.0) {
                    r.ratio_to_floor = Some(round3(mine / base));
                }
            }
        }
    }

    /// The row of `system` matching `like`'s measurement, if measured.
    pub fn find_peer(&self, system: &str, like: &Record) -> Option<&Record> {
        self.results
            .iter()
            .find(|r| r.system == system && r.same_measurement(like))
    }
}

/// Rows shown beside the peers that are not a peer library: the bare primitive another design is
/// built on (a session advisory lock: no lease, no fencing token, no queue). The
/// `distributed-lock-postgres` row, the library that wraps it, is the peer.
/// The handover floor's notification alone (see [`crate::reference`]) is no peer either.
const NOT_PEERS: &[&str] = &["pg_advisory_lock", FLOOR_NOTIFY];

/// The system name of the handover floor's notification alone (beside the `floor` row, which
/// also takes the freed lock).
pub const FLOOR_NOTIFY: &str = "floor-notify";

/// Whether `system` is a peer library: not locksmith in any variant, not the floor, not a bare
/// primitive ([`NOT_PEERS`]).
pub fn is_peer_library(system: &str) -> bool {
    !system.starts_with("locksmith") && system != "floor" && !NOT_PEERS.contains(&system)
}

/// Rounds to three decimals (keeps the JSON readable).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &str, p50: f64) -> Record {
        let mut r = Record::new(system, "redis", "uncontended");
        r.p50_us = Some(p50);
        r
    }

    #[test]
    fn ratios_to_floor_and_peer() {
        let mut report = Report {
            schema: SCHEMA.into(),
            machine: Machine {
                cores: 1,
                note: String::new(),
            },
            results: vec![row("locksmith", 90.0), row("floor", 60.0), row("rslock", 120.0)],
            notes: Vec::new(),
        };
        report.compute_ratios();
        let ls = &report.results[0];
        assert_eq!(ls.ratio_to_floor, Some(1.5));
        assert_eq!(ls.ratio_to_peer, Some(0.75));
        assert_eq!(ls.params["measured_peer"], "rslock");
        assert_eq!(report.results[2].ratio_to_floor, Some(2.0));
        assert_eq!(report.results[2].ratio_to_peer, None);
        assert_eq!(report.results[1].ratio_to_peer, None);
    }
}
