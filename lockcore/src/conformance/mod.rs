//! The conformance suite: one set of tests that every backend runs against a live instance, so all
//! backends are held to the same contract by the same code (like `object_store`'s `integration`
//! module), and the support the tests share (server URLs, `scripts/backends`, a faulty proxy).
//!
//! **Test support, not a stable API**: it changes with the tests, behind the `conformance`
//! feature, and is meant for locksmith's own tests and fault suite only.
//!
//! A backend's test file implements [`Harness`] and expands [`conformance_tests!`](crate::conformance_tests):
//!
//! ```ignore
//! struct MyHarness;
//! #[locksmith_core::driver::async_trait]
//! impl locksmith_core::conformance::Harness for MyHarness { /* ... */ }
//! locksmith_core::conformance_tests!(MyHarness);
//! ```
//!
//! Every test uses lock names with a random suffix, so tests may run concurrently against one
//! server and reruns never see leftovers of earlier runs. Every wait is bounded: a backend that
//! hangs fails the test instead of hanging the suite.

pub use harness::{env_url, unique_name, until_waiters, until_waiters_at_most, within, Harness};

pub mod churn;
pub mod composite;
pub mod deadlines;
pub mod election;
pub mod guarded;
mod harness;
pub mod lifecycle;
pub mod mutex;
pub mod process;
pub mod proxy;
pub mod rwlock;
pub mod semaphore;
pub mod servers;
pub mod sockets;
pub mod storm;

/// Expands to one `#[tokio::test]` per test of the mutex suite ([`mutex`]) and of the lifecycle
/// suite ([`lifecycle`]), each calling the suite with the harness
/// built by `$harness` (an expression, evaluated anew in each test, that may use `.await`).
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(@tests $harness;
            mutex::mutual_exclusion, mutex::try_acquire_while_held, mutex::acquire_times_out,
            mutex::cancelled_acquire_leaves_nothing, mutex::crashed_holder_expires,
            mutex::abandoned_lock_expires_beside_held_ones, mutex::renewal_keeps_lock_past_ttl,
            mutex::fencing_tokens_increase, mutex::lost_fires_when_removed_behind_back,
            mutex::names_are_independent, mutex::waiters_are_fifo, mutex::max_hold_releases,
            mutex::release_not_held_is_an_error, mutex::drop_releases, mutex::invalid_input_is_rejected,
            mutex::cancellation_after_grant_leaves_nothing, mutex::cancellation_storm_leaves_nothing,
            mutex::inspect_reports_holder_and_waiters, mutex::grants_say_whether_they_waited,
            lifecycle::release_cancelled_mid_flight_releases,
            lifecycle::backend_release_cancelled_releases, lifecycle::timed_out_waiter_that_exits_leaves_nothing,
            lifecycle::try_cut_by_its_timeout_that_exits_leaves_nothing,
            lifecycle::acquire_dropped_where_no_runtime_runs_leaves_nothing,
            lifecycle::shutdown_releases_everything, lifecycle::shutdown_with_a_waiter_queued_leaves_nothing,
            lifecycle::reads_after_shutdown_end_with_closed,
            lifecycle::a_stalled_call_holds_up_no_other_call);
    };
    (@tests $harness:expr; $($module:ident :: $test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let harness = $harness;
                $crate::conformance::$module::$test(&harness).await;
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per test of the semaphore, read-write lock and election suites
/// ([`semaphore`], [`rwlock`], [`election`]) and of the cancellation storm over all three
/// ([`storm`]), for a harness that implements [`Harness::residue_in`].
#[macro_export]
macro_rules! primitive_tests {
    ($harness:expr) => {
        $crate::primitive_tests!(@tests $harness;
            semaphore::semaphore_never_over_grants, semaphore::semaphore_try_acquire_when_full,
            semaphore::semaphore_waiters_are_fifo, semaphore::semaphore_cancelled_middle_waiter_takes_nothing,
            semaphore::semaphore_permit_counts_must_agree,
            semaphore::semaphore_crashed_holder_expires, semaphore::semaphore_cancellation_leaves_nothing,
            semaphore::bad_permit_counts_are_rejected,
            rwlock::rwlock_readers_share_writers_exclude, rwlock::rwlock_waiting_writer_blocks_later_readers,
            rwlock::rwlock_writer_that_gives_up_lets_readers_in,
            rwlock::rwlock_never_mixes_readers_and_writers, rwlock::rwlock_crashed_writer_expires,
            rwlock::rwlock_cancellation_leaves_nothing,
            churn::semaphore_churn_answers_every_call, churn::rwlock_churn_answers_every_call,
            election::election_one_leader_at_a_time_in_order, election::election_handover_shows_no_gap,
            election::election_crashed_leader_passes_on,
            election::election_try_and_cancel, election::election_watch_ends_at_shutdown,
            election::election_values_at_their_bounds, election::every_kind_is_told_when_removed_behind_back,
            election::every_kind_released_mid_flight_is_free,
            lifecycle::every_kind_timed_out_waiter_that_exits_leaves_nothing,
            election::families_are_independent, election::every_kind_names_are_independent,
            election::list_shows_locks_in_use,
            storm::cancellation_storm_over_every_kind_leaves_nothing);
    };
    (@tests $harness:expr; $($module:ident :: $test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let harness = $harness;
                $crate::conformance::$module::$test(&harness).await;
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per test of the guarded-write suite ([`guarded`]), for a
/// backend that implements [`crate::driver::LockBackend::write_guarded`]. `mutex_only: $harness`
/// leaves out the test under a semaphore permit and a writer lock, for a backend without them
/// (Redis's plain layout).
#[macro_export]
macro_rules! guarded_tests {
    (mutex_only: $harness:expr) => {
        $crate::conformance_tests!(@tests $harness;
            guarded::guarded_writes_apply_while_held, guarded::guarded_write_of_a_lost_lock_never_lands,
            guarded::guarded_write_of_an_expired_lease_never_lands, guarded::guarded_bad_input_is_rejected,
            guarded::data_keys_take_guarded_writes, guarded::token_register_admits_in_order,
            guarded::token_register_concurrent_admits_end_on_the_maximum);
    };
    ($harness:expr) => {
        $crate::guarded_tests!(mutex_only: $harness);
        $crate::conformance_tests!(@tests $harness; guarded::guarded_writes_under_permits_and_writers);
    };
}
