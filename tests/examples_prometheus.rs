//! `examples/prometheus.rs`: after a few rounds of locking, the Prometheus text has locksmith's
//! metrics, with the name label the example asks for.

#[allow(dead_code)]
#[path = "../examples/prometheus.rs"]
mod prometheus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_reach_prometheus() {
    let handle = prometheus::install();
    prometheus::workload("mem://examples-prometheus", 3)
        .await
        .expect("workload");
    let text = handle.render();
    for needle in [
        r#"locksmith_acquires_total{backend="mem",kind="mutex",name="reports",outcome="acquired"} 9"#,
        r#"locksmith_acquires_total{backend="mem",kind="semaphore",name="quota",outcome="acquired"} 9"#,
        r#"locksmith_releases_total{backend="mem",kind="mutex",name="reports",outcome="released"} 9"#,
        "locksmith_acquire_wait_seconds",
        "locksmith_hold_seconds",
        r#"locksmith_held{backend="mem",kind="mutex",name="reports"} 0"#,
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
}
