//! The Lua scripts: every state change of a lock is one atomic script on the server.
//!
//! Each script is a file under `src/lua/`: `mutex/` for the mutex (one lock key), `kinds/` for
//! semaphores, read-write locks and elections (holders in a sorted set; `kinds/state.lua`, the
//! state of one lock and its rules, is sent before each of their lock scripts), and `helpers/`,
//! one helper function per file. Every file starts with a comment saying what it does, its
//! settings, KEYS, ARGV and reply.
//!
//! Settings reach every script one way: the URL's settings (`fence_floor`, `restart_delay`,
//! `poller_gap`, `max_pass_over`) are constants written before the script's code
//! ([`LockScripts`]), never arguments; KEYS and ARGV carry only what changes per call. The
//! scripts that need no setting are built once ([`SCRIPTS`]).
//!
//! Key arguments: the mutex scripts take those of [`crate::LockKeys`] in its order (`lock,
//! fence, queue, alive`, then `streak, gap` with `poller_gap`; the ones that give a lock up drop
//! `fence`); the other kinds' lock scripts those of [`crate::KindKeys::script_keys`]. The batched
//! renewals take the keys of many locks.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use crate::config::Config;
use crate::protocol::library::{self, Function, Library, LuaScript};
use crate::protocol::lua::{code, with_helpers};

/// Mutex: one attempt, never queueing (see the file for its keys, arguments and reply).
const TRY_ACQUIRE: &str = include_str!("../lua/mutex/try_acquire.lua");
/// Mutex: a waiter's one step.
const WAIT_STEP: &str = include_str!("../lua/mutex/wait_step.lua");
/// Mutex: compare-and-delete, then wake the head of the queue.
const RELEASE: &str = include_str!("../lua/mutex/release.lua");
/// Mutex: clean-up of a cancelled or failed acquire.
const LEAVE: &str = include_str!("../lua/mutex/leave.lua");
/// Mutex: the watchdog's batch, compare-and-pexpire of many leases. Its leases are read through
/// the header before it: [`RENEW_MANY_LEASES`], or [`RENEW_MANY_CROSS_LEASES`] on a Redis Cluster
/// node (see [`renewal_sources`]).
const RENEW_MANY: &str = include_str!("../lua/mutex/renew_many.lua");
/// The header of [`RENEW_MANY`] that reads its leases from KEYS (the lock keys) and ARGV.
const RENEW_MANY_LEASES: &str = include_str!("../lua/mutex/renew_many_leases.lua");
/// The header of [`RENEW_MANY`] for the locks of one Redis Cluster node: the lock keys are in
/// ARGV (with `allow-cross-slot-keys`), only the first is declared in KEYS.
const RENEW_MANY_CROSS_LEASES: &str = include_str!("../lua/mutex/renew_many_cross_leases.lua");
/// Quorum mode: raises the fencing counter to the token chosen for the lease.
const RAISE_FENCE: &str = include_str!("../lua/mutex/raise_fence.lua");
/// A guarded write: the lease's check and the write in one step.
const GUARDED_WRITE: &str = include_str!("../lua/guarded/write.lua");
/// Read-only look for `inspect`.
const INSPECT: &str = include_str!("../lua/mutex/inspect.lua");

/// Other kinds: the state of one lock and its rules (the names of its keys and arguments, and the
/// functions of the grant rule), sent before each of their lock scripts.
const KIND_STATE: &str = include_str!("../lua/kinds/state.lua");
/// Other kinds: one attempt, never queueing.
const KIND_TRY_ACQUIRE: &str = include_str!("../lua/kinds/try_acquire.lua");
/// Other kinds: a waiter's one step.
const KIND_WAIT_STEP: &str = include_str!("../lua/kinds/wait_step.lua");
/// Other kinds: gives up a holder and wakes the waiters that may hold now.
const KIND_RELEASE: &str = include_str!("../lua/kinds/release.lua");
/// Other kinds: clean-up of a cancelled or failed acquire.
const KIND_LEAVE: &str = include_str!("../lua/kinds/leave.lua");
/// Other kinds: the watchdog's batch, read through [`KIND_RENEW_MANY_LEASES`] or
/// [`KIND_RENEW_MANY_CROSS_LEASES`] (see [`renewal_sources`]).
const KIND_RENEW_MANY: &str = include_str!("../lua/kinds/renew_many.lua");
/// The header of [`KIND_RENEW_MANY`] that reads its leases from KEYS (holders set and holder data
/// of each) and ARGV.
const KIND_RENEW_MANY_LEASES: &str = include_str!("../lua/kinds/renew_many_leases.lua");
/// The header of [`KIND_RENEW_MANY`] for the locks of one Redis Cluster node.
const KIND_RENEW_MANY_CROSS_LEASES: &str = include_str!("../lua/kinds/renew_many_cross_leases.lua");
/// Elections, read-only: who leads.
const LEADER: &str = include_str!("../lua/kinds/leader.lua");

/// The two sources of a batched renewal (`body`, a `.lua` file that reads its leases through
/// `LEASES` and `lease(i)`): with the header `leases` that reads them from KEYS and ARGV, and with
/// the header `cross_leases` that reads every key from ARGV, flagged `allow-cross-slot-keys`, for
/// the locks of one Redis Cluster node (Redis 7.0 or later). The cross variant is the same body:
/// only the header differs.
pub(crate) fn renewal_sources(body: &str, leases: &str, cross_leases: &str) -> (String, String) {
    let plain = with_helpers(&format!("{}{}", code(leases), code(body)));
    let cross = format!(
        "#!lua flags=allow-cross-slot-keys\n{}",
        with_helpers(&format!("{}{}", code(cross_leases), code(body)))
    );
    (plain, cross)
}

/// The scripts of one lock kind's queue: an attempt, a waiter's step, giving a held lock up and
/// leaving the queue.
pub(crate) struct QueueScripts {
    /// One attempt, never queueing (`try_acquire.lua`).
    pub(crate) try_acquire: LuaScript,
    /// A waiter's one step (`wait_step.lua`).
    pub(crate) wait_step: LuaScript,
    /// Gives up a held lock and wakes who may hold now (`release.lua`).
    pub(crate) release: LuaScript,
    /// Clean-up of a cancelled or failed acquire (`leave.lua`).
    pub(crate) leave: LuaScript,
}

impl QueueScripts {
    /// The four, in the order the library lists them.
    fn from(scripts: &mut impl Iterator<Item = LuaScript>) -> QueueScripts {
        let mut next = || scripts.next().expect("four scripts per queue");
        QueueScripts {
            try_acquire: next(),
            wait_step: next(),
            release: next(),
            leave: next(),
        }
    }
}

/// The scripts that read the URL's settings, for one set of them: the fence floor argument
/// ([`crate::FenceFloor`]: `time`, a number or empty), the restart delay, `poller_gap` and
/// `max_pass_over`, and whether a release hands the lock over, written into the code as
/// constants (`FLOOR`, `DELAY`, `GAP`, `MAX_PASS`, `DIRECT`)
/// rather than sent as arguments on every call: every key or argument of a call costs the
/// server about as much as a `GET`, and these run on every acquire and release. Each set of
/// settings is a library (and plain scripts) of its own on the server (a few per application).
/// Without `poller_gap` the mutex scripts never touch the streak and gap keys, and are not sent
/// them.
pub(crate) struct LockScripts {
    /// The mutex's (`lua/mutex/`).
    pub(crate) mutex: QueueScripts,
    /// Semaphores', read-write locks' and elections' (`lua/kinds/`, after `state.lua`).
    pub(crate) kinds: QueueScripts,
    /// How many of [`crate::LockKeys`]'s script keys the mutex's acquire scripts take (4, or 6
    /// with the streak and gap keys of `poller_gap`); its release scripts take one fewer (no
    /// `fence`).
    pub(crate) mutex_keys: usize,
    /// The library that defines all eight, for `FUNCTION LOAD` at connect.
    pub(crate) library: Arc<Library>,
    /// The plain scripts' sources, for `SCRIPT LOAD` at connect where functions cannot be used.
    pub(crate) sources: Vec<String>,
}

impl LockScripts {
    /// The scripts for the settings of `config`.
    pub(crate) fn for_config(config: &Config) -> LockScripts {
        // Not `millis`: 0 means "off" for these.
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        LockScripts::new(
            &config.fence_floor.arg(),
            ms(config.restart_delay),
            ms(config.poller_gap),
            ms(config.max_pass_over),
            config.hands_over(),
        )
    }

    /// The scripts for these settings (ms for the durations; 0: off). `hands_over`: a mutex's
    /// release grants the lock to the head of its queue itself (`DIRECT`, see
    /// `lua/mutex/release.lua`), where one server's word is the grant ([`Config::hands_over`]).
    pub(crate) fn new(
        floor: &str,
        restart_delay_ms: u64,
        poller_gap_ms: u64,
        max_pass_over_ms: u64,
        hands_over: bool,
    ) -> LockScripts {
        // The floor is written as a Lua string: it is `time`, digits or nothing, never a quote.
        debug_assert!(
            floor.chars().all(|c| c.is_ascii_alphanumeric()),
            "fence floor {floor:?}"
        );
        let settings = format!(
            "local FLOOR, DELAY, GAP, MAX_PASS, DIRECT = '{floor}', {restart_delay_ms}, {poller_gap_ms}, {max_pass_over_ms}, {hands_over}\n"
        );
        // The scripts that give a lock up run on a server out of memory (see `Function`).
        let function = |name: &'static str, body: String| Function {
            name,
            body,
            allow_oom: name.ends_with("_release") || name.ends_with("_leave"),
        };
        let mutex = [
            ("mutex_try_acquire", TRY_ACQUIRE),
            ("mutex_wait_step", WAIT_STEP),
            ("mutex_release", RELEASE),
            ("mutex_leave", LEAVE),
        ]
        .map(|(name, file)| function(name, code(file).to_owned()));
        let kinds = [
            ("kinds_try_acquire", KIND_TRY_ACQUIRE),
            ("kinds_wait_step", KIND_WAIT_STEP),
            ("kinds_release", KIND_RELEASE),
            ("kinds_leave", KIND_LEAVE),
        ]
        .map(|(name, file)| function(name, format!("{}{}", code(KIND_STATE), code(file))));
        let scripts = library::build(&settings, mutex.into_iter().chain(kinds).collect());
        let library = scripts[0].library.clone();
        let sources = scripts.iter().map(|s| s.source.clone()).collect();
        let mut scripts = scripts.into_iter();
        LockScripts {
            mutex: QueueScripts::from(&mut scripts),
            kinds: QueueScripts::from(&mut scripts),
            mutex_keys: if poller_gap_ms > 0 { 6 } else { 4 },
            library,
            sources,
        }
    }
}

/// The scripts that read no setting (built once). The watchdog's batches stay plain scripts
/// (`EVALSHA`, reloaded on `NOSCRIPT`): one call per tick and 500 leases, sent in a pipeline
/// ([`crate::renew`]); the others are also functions of a library of their own.
pub(crate) struct Scripts {
    /// The watchdog's batch for mutexes (`lua/mutex/renew_many.lua` after its KEYS header).
    pub(crate) renew_mutexes: Script,
    /// The same for the locks of one Redis Cluster node (Redis 7): generated from it with the
    /// header [`RENEW_MANY_CROSS_LEASES`] ([`renewal_sources`]).
    pub(crate) renew_mutexes_cross: Script,
    /// The watchdog's batch for the other kinds (`lua/kinds/renew_many.lua`).
    pub(crate) renew_kinds: Script,
    /// The same for the locks of one Redis Cluster node.
    pub(crate) renew_kinds_cross: Script,
    /// Quorum mode: raises the fencing counter (`lua/mutex/raise_fence.lua`).
    pub(crate) raise_fence: LuaScript,
    /// Read-only look at a mutex for `inspect` (`lua/mutex/inspect.lua`).
    pub(crate) inspect: LuaScript,
    /// Read-only: the leader of an election (`lua/kinds/leader.lua`).
    pub(crate) leader: LuaScript,
    /// A guarded write (`lua/guarded/write.lua`).
    pub(crate) guarded_write: LuaScript,
    /// The library of the four above, for `FUNCTION LOAD` at connect.
    pub(crate) library: Arc<Library>,
    /// The sources of the plain scripts to load at connect with `SCRIPT LOAD`: the two
    /// renewals (not the cross-slot ones, which need Redis 7), then the four above (loaded only
    /// where functions cannot be used).
    pub(crate) sources: Vec<String>,
}

/// How many of [`Scripts::sources`] are the renewals, which are loaded on every server.
pub(crate) const RENEWAL_SOURCES: usize = 2;

/// The one instance.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let (renew_mutexes, renew_mutexes_cross) = renewal_sources(RENEW_MANY, RENEW_MANY_LEASES, RENEW_MANY_CROSS_LEASES);
    let (renew_kinds, renew_kinds_cross) =
        renewal_sources(KIND_RENEW_MANY, KIND_RENEW_MANY_LEASES, KIND_RENEW_MANY_CROSS_LEASES);
    let functions = [
        ("raise_fence", RAISE_FENCE),
        ("inspect", INSPECT),
        ("leader", LEADER),
        ("guarded_write", GUARDED_WRITE),
    ]
    .map(|(name, file)| Function {
        name,
        body: code(file).to_owned(),
        allow_oom: false,
    });
    let scripts = library::build("", functions.into());
    let library = scripts[0].library.clone();
    let mut sources = vec![renew_mutexes.clone(), renew_kinds.clone()];
    sources.extend(scripts.iter().map(|s| s.source.clone()));
    let [raise_fence, inspect, leader, guarded_write]: [LuaScript; 4] = scripts.try_into().expect("four functions");
    Scripts {
        renew_mutexes: Script::new(&renew_mutexes),
        renew_kinds: Script::new(&renew_kinds),
        raise_fence,
        inspect,
        leader,
        guarded_write,
        renew_mutexes_cross: Script::new(&renew_mutexes_cross),
        renew_kinds_cross: Script::new(&renew_kinds_cross),
        library,
        sources,
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::lua::HELPERS;

    #[test]
    fn settings_are_constants_of_every_script_that_reads_one() {
        let a = LockScripts::new("time", 15000, 0, 0, true);
        assert_eq!(a.sources.len(), 8);
        for source in &a.sources {
            assert!(source.starts_with("local FLOOR, DELAY, GAP, MAX_PASS, DIRECT = 'time', 15000, 0, 0, true\n"));
        }
        assert_eq!(a.mutex_keys, 4);
        let b = LockScripts::new("", 0, 200, 5000, false);
        assert_eq!(b.mutex_keys, 6);
        assert_ne!(
            a.mutex.try_acquire.script.get_hash(),
            b.mutex.try_acquire.script.get_hash()
        );
        assert_ne!(a.kinds.wait_step.script.get_hash(), b.kinds.wait_step.script.get_hash());
        assert_ne!(a.library.name, b.library.name);
        assert_ne!(a.mutex.try_acquire.function, b.mutex.try_acquire.function);
        assert!(a
            .library
            .source
            .contains("local FLOOR, DELAY, GAP, MAX_PASS, DIRECT = 'time', 15000, 0, 0, true\n"));
        // The same settings, the same scripts (one entry in the server's script cache) and the
        // same library (loading it again changes nothing).
        let again = LockScripts::new("time", 15000, 0, 0, true);
        assert_eq!(a.mutex.release.script.get_hash(), again.mutex.release.script.get_hash());
        assert_eq!(a.kinds.leave.script.get_hash(), again.kinds.leave.script.get_hash());
        assert_eq!(a.library.source, again.library.source);
        assert_eq!(a.kinds.leave.function, again.kinds.leave.function);
    }

    /// Every source sent to the server: the scripts with settings (with and without
    /// `poller_gap`), the others and both cross-slot renewals.
    fn all_sources() -> Vec<String> {
        let (a, b) = (
            LockScripts::new("time", 15000, 0, 0, true),
            LockScripts::new("", 0, 200, 5000, false),
        );
        let mut sources = a.sources.clone();
        sources.extend(b.sources.iter().cloned());
        sources.extend(SCRIPTS.sources.iter().cloned());
        for library in [&a.library, &b.library, &SCRIPTS.library] {
            sources.push(library.source.clone());
        }
        sources.push(renewal_sources(RENEW_MANY, RENEW_MANY_LEASES, RENEW_MANY_CROSS_LEASES).1);
        sources.push(renewal_sources(KIND_RENEW_MANY, KIND_RENEW_MANY_LEASES, KIND_RENEW_MANY_CROSS_LEASES).1);
        sources
    }

    #[test]
    fn each_script_defines_the_helpers_it_calls_and_no_others() {
        for (name, file) in HELPERS {
            assert_eq!(code(file).matches("local function ").count(), 1, "{name}");
            assert!(code(file).starts_with(&format!("local function {name}(")), "{name}");
        }
        for source in &all_sources() {
            for (name, _) in HELPERS {
                let defined = source.contains(&format!("local function {name}("));
                let called = source.matches(&format!("{name}(")).count() > usize::from(defined);
                assert_eq!(called, defined, "{name} in {source}");
            }
        }
        // The leave grants nothing: it needs neither the clock's fence nor the data-loss check.
        let leave = &LockScripts::new("time", 15000, 0, 0, true).sources[3];
        assert!(!leave.contains("next_fence") && !leave.contains("data_loss_wait"));
    }

    #[test]
    fn every_lua_file_starts_with_its_doc_and_every_helper_is_listed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lua");
        let mut files = 0;
        for dir in ["helpers", "mutex", "kinds"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(text.starts_with("-- "), "{} starts with no comment", path.display());
                assert!(!code(&text).starts_with("--"), "{}", path.display());
                if dir == "helpers" {
                    let name = path.file_stem().unwrap().to_str().unwrap();
                    assert!(HELPERS.iter().any(|(n, _)| *n == name), "{name} is not in HELPERS");
                }
                files += 1;
            }
        }
        assert_eq!(files, HELPERS.len() + 9 + 9);
    }

    #[test]
    fn cross_renewals_are_the_plain_ones_with_another_header() {
        for (body, leases, cross_leases) in [
            (RENEW_MANY, RENEW_MANY_LEASES, RENEW_MANY_CROSS_LEASES),
            (KIND_RENEW_MANY, KIND_RENEW_MANY_LEASES, KIND_RENEW_MANY_CROSS_LEASES),
        ] {
            let (plain, cross) = renewal_sources(body, leases, cross_leases);
            assert!(plain.ends_with(code(body)) && cross.ends_with(code(body)), "{cross}");
            assert!(cross.starts_with("#!lua flags=allow-cross-slot-keys\n") && !plain.starts_with("#!"));
            assert!(!cross.contains("KEYS"), "{cross}");
        }
    }

    #[test]
    fn no_script_reads_a_setting_from_its_arguments() {
        // The mutex's ARGV: token, TTL, wake prefix, waiter TTL; the other kinds': entry, TTL,
        // wake prefix, waiter TTL, leader channel, campaign value.
        for body in [TRY_ACQUIRE, WAIT_STEP, RELEASE, LEAVE].map(code) {
            for arg in ["ARGV[5]", "ARGV[6]", "ARGV[7]"] {
                assert!(!body.contains(arg), "{arg} in {body}");
            }
        }
        let state = code(KIND_STATE);
        assert!(!state.contains("ARGV[7]") && !state.contains("ARGV[8]"), "{state}");
        for setting in ["FLOOR =", "DELAY =", "FLOOR, ", "DELAY, "] {
            assert!(!state.contains(&format!("local {setting}")), "{state}");
        }
    }
}
