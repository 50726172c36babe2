//! Every call ends in time when PostgreSQL goes away or stops answering (through a proxy that
//! cuts or freezes the traffic): see `locksmith_core::conformance::deadlines`.

#[allow(dead_code)] // only the server URL
mod common;

use std::time::Duration;

use locksmith_core::conformance::deadlines;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_in_time_when_postgres_goes_away_or_falls_silent() {
    let base = common::server_url();
    let url = BackendUrl::parse(&base).unwrap();
    let upstream = url.hosts[0].to_addr(5432);
    let (user, password) = url.credentials.clone().unwrap_or_default();
    let password = password.unwrap_or_default();
    let db = url.path.clone();
    let request_timeout = Duration::from_secs(2);
    let schema = format!("t_{:016x}", rand::random::<u64>());
    deadlines::calls_end_in_time(&upstream, request_timeout, |addr| {
        let url =
            format!("postgres://{user}:{password}@{addr}/{db}?schema={schema}&connect_timeout=1s&request_timeout=2s");
        async move {
            locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
                .await
                .unwrap()
        }
    })
    .await;
}
