//! The fencing counter of a lock, as clients with different `fence_floor`s leave it: without the
//! time floor it is all there is, so it never expires; and a fixed floor leaves room for the
//! tokens after it.

mod common;

use common::{admin, locker, redis_url, with_options};
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::LockError;
use locksmith_redis::LockKeys;

/// Bug: a counter made by a client with the time floor expires an hour after its lease (the
/// clock keeps such tokens growing); a client with `fence_floor=none` (or a number) raised it
/// keeping that expiry, so an hour later its counter was gone and its tokens started again at 1,
/// below every earlier one. Now a counter raised without the time floor loses its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_raised_without_the_time_floor_never_expires() {
    let base = redis_url();
    let name = unique_name("fence_counter");
    let timed = locker(&base).await;
    timed
        .lock(&name)
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let plain_url = with_options(&base, "fence_floor=none");
    let plain = locker(&plain_url).await;
    let guard = plain.lock(&name).acquire().await.expect("acquire");
    let token = guard.fencing_token();
    guard.release().await.expect("release");
    let keys = LockKeys::for_url(&BackendUrl::parse(&plain_url).unwrap(), &LockName::new(&name).unwrap()).unwrap();
    let mut admin = admin(&base).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&keys.fence)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        pttl, -1,
        "the counter keeps the time floor's expiry: it would expire with token {token}"
    );
}

/// A fixed floor near 2^53 left no room: the scripts count in Lua's doubles, so the tokens after
/// it repeated (2^53 + 1 is 2^53). A floor from 2^52 on is refused.
#[tokio::test]
async fn a_fixed_floor_near_2_53_is_refused() {
    for floor in [1u64 << 52, (1 << 53) - 2] {
        let url = with_options(&redis_url(), &format!("fence_floor={floor}"));
        let result = locksmith_redis::connect(&BackendUrl::parse(&url).unwrap()).await;
        assert!(
            matches!(result, Err(LockError::InvalidUrl { .. })),
            "{floor}: {result:?}"
        );
    }
    let url = with_options(&redis_url(), &format!("fence_floor={}", (1u64 << 52) - 1));
    assert!(locksmith_redis::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .is_ok());
}
