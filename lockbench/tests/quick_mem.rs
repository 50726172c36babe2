//! Runs `lockbench --quick` on the in-process backend only (no server needed: fast enough for CI)
//! and checks that the JSON it writes follows the `lockbench/1` schema.

use std::process::Command;

use serde_json::Value;

const WORKLOADS: &[&str] = &[
    "uncontended",
    "handover",
    "contended",
    "herd",
    "takeover",
    "scale",
    "guarded",
    "semaphore",
    "semaphore-handover",
    "rwlock",
    "rwlock-handover",
    "election-resign",
    "election-failover",
];
const SYSTEMS: &[&str] = &["locksmith", "floor", "rslock", "etcd-lock-rpc", "zk-recipe"];
const BACKENDS: &[&str] = &["mem", "etcd", "zk", "redis"];
const NUMBERS: &[&str] = &[
    "ops",
    "p50_us",
    "p99_us",
    "throughput_per_s",
    "violations",
    "requests_per_handover",
    "takeover_ms",
    "renewal_requests_per_s",
    "rss_bytes_per_lock",
    "ratio_to_floor",
    "ratio_to_peer",
];

#[test]
fn quick_run_on_mem_writes_the_schema() {
    let dir = std::env::temp_dir().join(format!("lockbench-test-{}", std::process::id()));
    let json = dir.join("results.json");
    let markdown = dir.join("comparison.md");
    let charts = dir.join("charts");
    let out = Command::new(env!("CARGO_BIN_EXE_lockbench"))
        .args(["--quick", "--backends", "mem", "--note", "test run"])
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(&markdown)
        .arg("--charts")
        .arg(&charts)
        .output()
        .expect("lockbench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lockbench failed:\n{stderr}");

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).expect("valid JSON");
    assert_eq!(report["schema"], "lockbench/1");
    assert!(
        report["machine"]["cores"].as_u64().is_some_and(|c| c >= 1),
        "machine.cores: {}",
        report["machine"]
    );
    assert_eq!(report["machine"]["note"], "test run");
    let results = report["results"].as_array().expect("results is an array");
    assert!(!results.is_empty());

    let mut seen = std::collections::BTreeSet::new();
    for r in results {
        let (system, backend, workload) = (r["system"].as_str(), r["backend"].as_str(), r["workload"].as_str());
        assert!(system.is_some_and(|s| SYSTEMS.contains(&s)), "bad system in {r}");
        assert!(backend.is_some_and(|b| BACKENDS.contains(&b)), "bad backend in {r}");
        assert!(workload.is_some_and(|w| WORKLOADS.contains(&w)), "bad workload in {r}");
        assert!(r["params"].is_object(), "params must be an object: {r}");
        for (key, value) in r.as_object().expect("each result is an object") {
            match key.as_str() {
                "system" | "backend" | "workload" | "params" => {}
                k if NUMBERS.contains(&k) => {
                    assert!(value.is_number(), "{k} must be a number (omitted when absent): {r}")
                }
                k => panic!("field {k} is not in the schema: {r}"),
            }
        }
        if matches!(workload, Some("contended" | "semaphore" | "rwlock")) {
            assert_eq!(r["violations"], 0, "mutual exclusion violated: {r}");
        }
        seen.insert(workload.unwrap_or_default().to_string());
    }
    // Everything but the takeovers (a server shared with a child process) runs on mem.
    for w in [
        "uncontended",
        "handover",
        "contended",
        "herd",
        "scale",
        "guarded",
        "semaphore",
        "semaphore-handover",
        "rwlock",
        "rwlock-handover",
        "election-resign",
    ] {
        assert!(seen.contains(w), "no {w} row in {seen:?}");
    }
    let notes = report["notes"].as_array().expect("the skipped takeover is noted");
    assert!(
        notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("takeover"))),
        "{notes:?}"
    );

    let md = std::fs::read_to_string(&markdown).expect("markdown written");
    assert!(md.contains("## Targets") && md.contains("| mem |"), "{md}");
    assert!(charts.join("uncontended-mem.svg").exists() && charts.join("contended.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
