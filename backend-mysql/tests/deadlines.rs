//! Every call ends in time when MySQL goes away or stops answering (through a proxy that cuts or
//! freezes the traffic): see `locksmith_core::conformance::deadlines`.

#[allow(dead_code)] // only the server URL and the harness's database
mod common;

use std::time::Duration;

use locksmith_core::conformance::deadlines;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_in_time_when_mysql_goes_away_or_falls_silent() {
    let harness = common::MyHarness::plain().await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let upstream = url.hosts[0].to_addr(3306);
    let through = harness.url.replacen(&upstream, "{addr}", 1);
    let request_timeout = Duration::from_secs(2);
    deadlines::calls_end_in_time(&upstream, request_timeout, |addr| {
        let url = format!(
            "{}?connect_timeout=1s&request_timeout=2s",
            through.replace("{addr}", &addr)
        );
        async move {
            locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
                .await
                .unwrap()
        }
    })
    .await;
}
