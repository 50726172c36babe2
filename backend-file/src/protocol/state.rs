//! What a lock's state file holds: its queue of holders and waiters in arrival order and its last
//! fencing token, and the rule that drops the entries of the dead.

use std::collections::HashMap;
use std::sync::Arc;

use locksmith_core::driver::fast_hash::FastBuildHasher;
use locksmith_core::driver::Role;
use serde::{Deserialize, Serialize};

/// The version of the state file's format, written in every file.
pub(crate) const FORMAT: u32 = 1;

/// A text of the state file: shared, not copied, when a state is cloned (a step keeps the state it
/// read beside the one it changes, and this process's copy of the newest state, `cache.rs`).
pub(crate) type Text = Arc<str>;

/// The highest fencing token, and the highest `last_token` a state file may hold: tokens stay
/// signed 64-bit numbers (what fenced stores keep), and a counter must have room for the next.
pub(crate) const MAX_TOKEN: u64 = i64::MAX.unsigned_abs() - 1;

/// One lock's state file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct State {
    /// [`FORMAT`].
    pub format: u32,
    /// The lock: `Family::segment` of its name (names whose file names were cut to one stem are
    /// told apart by it).
    pub segment: Text,
    /// The boot the entries were written in (`/proc/sys/kernel/random/boot_id`): after a reboot
    /// every entry is dead.
    pub boot: Text,
    /// The last fencing token handed out for this lock.
    pub last_token: u64,
    /// Holders and waiters, in arrival order.
    pub entries: Vec<Entry>,
}

/// A holder or a waiter.
///
/// It lives while its locker does (the locker's liveness file is locked) and until its TTL has
/// passed since the later of the moment it joined or was granted (`since_ns`) and the locker's
/// last heartbeat (written in the liveness file on every renewal: one write renews every entry of
/// the locker, however many it has; see `conn/owner.rs`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Unique among the entries of every lock: the next of its locker's series (`random::Ids`),
    /// seeded from the kernel.
    pub id: Text,
    /// The locker it belongs to: its liveness file in `.owners/`.
    pub owner: Text,
    /// The process and host of that locker: what `inspect` shows.
    pub pid: u32,
    /// The host name.
    pub host: Text,
    /// How it shares the lock: `exclusive`, `shared` or `permit:N`.
    pub role: Text,
    /// What an election candidate campaigns with.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub value: Text,
    /// When it joined, or was granted once it holds: `CLOCK_BOOTTIME` in nanoseconds (one clock
    /// for every process of the machine, never set back).
    pub since_ns: u64,
    /// Its TTL in nanoseconds.
    pub ttl_ns: u64,
    /// Set once it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<Grant>,
    /// When it expires unless its locker beats again (`CLOCK_BOOTTIME` ns), as the last
    /// [`State::prune`] found; not stored.
    #[serde(skip)]
    pub expires_ns: u64,
}

/// A holder's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grant {
    /// Its fencing token.
    pub token: u64,
}

/// What a liveness check found of a locker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Its process ended (or its locker shut down).
    Dead,
    /// Alive; its last heartbeat (`CLOCK_BOOTTIME` ns).
    Beat(u64),
}

/// The instant a step runs at, on the clocks the state uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Now {
    /// `CLOCK_BOOTTIME`, nanoseconds.
    pub boot_ns: u64,
    /// The wall clock, microseconds since the Unix epoch: the floor of fencing tokens.
    pub unix_micros: u64,
}

impl Now {
    /// Now.
    pub fn read() -> Now {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Now {
            boot_ns: (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64,
            unix_micros: unix_micros(),
        }
    }

    /// An instant at `boot_ns` with the wall clock at the epoch (tests).
    #[cfg(test)]
    pub fn at_boot(boot_ns: u64) -> Now {
        Now {
            boot_ns,
            unix_micros: 0,
        }
    }

    /// The time from now until `ns` (zero if it has passed).
    pub fn until(self, ns: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(ns.saturating_sub(self.boot_ns))
    }
}

/// The wall clock in microseconds since the Unix epoch (0 before it).
fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl Entry {
    /// Its role, as the queue rule reads it (`None` if the file says something else).
    pub fn role(&self) -> Option<Role> {
        match &*self.role {
            "exclusive" => Some(Role::Exclusive),
            "shared" => Some(Role::Shared),
            other => other.strip_prefix("permit:")?.parse().ok().map(Role::Permit),
        }
    }

    /// The text of a role in the file.
    pub fn role_text(role: Role) -> Text {
        static EXCLUSIVE: std::sync::OnceLock<Text> = std::sync::OnceLock::new();
        static SHARED: std::sync::OnceLock<Text> = std::sync::OnceLock::new();
        match role {
            Role::Exclusive => EXCLUSIVE.get_or_init(|| "exclusive".into()).clone(),
            Role::Shared => SHARED.get_or_init(|| "shared".into()).clone(),
            Role::Permit(n) => format!("permit:{n}").into(),
        }
    }

    /// The holder id of a lease of this entry, as `inspect` shows it: `host:pid:id`.
    pub fn holder_id(&self) -> String {
        let mut pid = itoa::Buffer::new();
        [&*self.host, ":", pid.format(self.pid), ":", &*self.id].concat()
    }
}

/// The entry id in a holder id made by [`Entry::holder_id`].
pub(crate) fn entry_id(holder_id: &str) -> &str {
    holder_id.rsplit(':').next().unwrap_or(holder_id)
}

impl State {
    /// An empty state for the lock `segment` (tokens then start at the wall clock: see
    /// `queue.rs`).
    pub fn new(segment: &str, boot: impl Into<Text>) -> State {
        State {
            format: FORMAT,
            segment: segment.into(),
            boot: boot.into(),
            last_token: 0,
            entries: Vec::new(),
        }
    }

    /// Drops the entries of the dead: all of them after a reboot, those whose owner is gone, and
    /// those whose TTL has passed since they joined or were granted and since their owner's last
    /// heartbeat. Sets the `expires_ns` of the others. Returns whether any was dropped.
    ///
    /// `liveness(owner, fresh)` tells what became of an owner, asked once per owner. Unless
    /// `fresh`, it may answer from memory, with a heartbeat older than the last one (a heartbeat
    /// only moves forward, so a remembered one that keeps an entry alive is right). An entry that
    /// such a heartbeat would expire within half its TTL is asked about again, freshly: before it
    /// is dropped, and so that the expiries found stay half a TTL ahead for lockers that beat (a
    /// waiter sleeps until the next one; remembered heartbeats would wake it over and over).
    pub fn prune(&mut self, boot: &str, now: Now, mut liveness: impl FnMut(&str, bool) -> Liveness) -> bool {
        let before = self.entries.len();
        // An empty boot id is a process that cannot read it (a sandbox that hides /proc/sys): it
        // and the others tell a reboot by the liveness files alone, as on a kernel without one.
        // Entries are dropped for their boot only when both ids are known and differ; dropping
        // for a mere mismatch with an unknown one would let such a process and another erase
        // each other's live holders.
        if !boot.is_empty() && *self.boot != *boot {
            if !self.boot.is_empty() {
                self.entries.clear();
            }
            self.boot = boot.into();
        }
        // One question per owner (a queue of 1,000 waiters may have 1,000 owners); whether its
        // answer was fresh.
        let mut verdicts: HashMap<Text, (Liveness, bool), FastBuildHasher> = HashMap::default();
        self.entries.retain_mut(|e| {
            let (mut verdict, mut fresh) = match verdicts.get(&e.owner) {
                Some(known) => *known,
                None => {
                    let asked = (liveness(&e.owner, false), false);
                    verdicts.insert(e.owner.clone(), asked);
                    asked
                }
            };
            loop {
                let expires_ns = match verdict {
                    Liveness::Dead => return false,
                    Liveness::Beat(beat) => e.since_ns.max(beat).saturating_add(e.ttl_ns),
                };
                if fresh || expires_ns > now.boot_ns.saturating_add(e.ttl_ns / 2) {
                    e.expires_ns = expires_ns;
                    return expires_ns > now.boot_ns;
                }
                (verdict, fresh) = (liveness(&e.owner, true), true);
                verdicts.insert(e.owner.clone(), (verdict, fresh));
            }
        });
        self.entries.len() < before
    }

    /// The index of entry `id`.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.entries.iter().position(|e| *e.id == *id)
    }

    /// The roles of the queue, in order ([`locksmith_core::LockError::Protocol`] for a role this
    /// version does not know).
    pub fn roles(&self) -> locksmith_core::Result<Vec<Role>> {
        self.entries
            .iter()
            .map(|e| {
                e.role().ok_or_else(|| {
                    locksmith_core::LockError::Protocol(format!("unknown role {:?} in a state file", e.role))
                })
            })
            .collect()
    }

    /// The earliest expiry of an entry (as the last [`State::prune`] found), if there is one.
    pub fn next_expiry(&self) -> Option<u64> {
        self.entries.iter().map(|e| e.expires_ns).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, owner: &str, since_ns: u64, ttl_ns: u64) -> Entry {
        Entry {
            id: id.into(),
            owner: owner.into(),
            pid: 1,
            host: "h".into(),
            role: "exclusive".into(),
            value: Text::default(),
            since_ns,
            ttl_ns,
            grant: None,
            expires_ns: 0,
        }
    }

    #[test]
    fn prune_drops_the_dead_the_expired_and_everything_of_another_boot() {
        let now = Now::at_boot(1_000);
        let mut s = State::new("x", "boot1");
        s.entries = vec![
            entry("1", "dead", 900, 1_000),
            // Joined long ago, its owner last beat at 500: 500 + 400 < 1000.
            entry("2", "slow", 0, 400),
            // The same owner's heartbeat keeps a longer TTL alive.
            entry("3", "slow", 0, 600),
            // Granted recently: since 800 + 300 > 1000, whatever the heartbeat.
            entry("4", "slow", 800, 300),
        ];
        let mut asked = Vec::new();
        assert!(s.prune("boot1", now, |o, fresh| {
            asked.push((o.to_owned(), fresh));
            if o == "dead" {
                Liveness::Dead
            } else {
                Liveness::Beat(500)
            }
        }));
        let ids: Vec<_> = s.entries.iter().map(|e| &*e.id).collect();
        assert_eq!(ids, ["3", "4"]);
        let asked: Vec<_> = asked.iter().map(|(o, fresh)| (o.as_str(), *fresh)).collect();
        assert_eq!(
            asked,
            [("dead", false), ("slow", false), ("slow", true)],
            "each owner is asked once, and freshly before an entry of it is dropped as expired"
        );
        assert_eq!(s.next_expiry(), Some(1_100));
        assert!(!s.prune("boot1", now, |_, _| Liveness::Beat(1_000)));
        assert!(s.prune("boot2", now, |_, _| Liveness::Beat(1_000)));
        assert!(s.entries.is_empty());
    }

    /// A process that cannot read the boot id (`""`) and one that can keep each other's live
    /// entries. (Before, each took the other's entries for another boot's and dropped them: two
    /// holders at once.)
    #[test]
    fn an_unknown_boot_id_drops_nobody_s_entries() {
        let now = Now::at_boot(1_000);
        for (written, reading) in [("boot1", ""), ("", "boot1")] {
            let mut s = State::new("x", written);
            s.entries = vec![entry("1", "o", 900, 1_000)];
            assert!(!s.prune(reading, now, |_, _| Liveness::Beat(1_000)));
            assert_eq!(s.entries.len(), 1, "written in boot {written:?}, pruned in {reading:?}");
        }
    }

    #[test]
    fn a_remembered_heartbeat_never_drops_an_entry_a_fresh_one_keeps() {
        let now = Now::at_boot(1_000);
        let mut s = State::new("x", "boot1");
        s.entries = vec![
            // Under the remembered beat (500) both expired; the last beat (900) keeps the second.
            entry("1", "o", 0, 50),
            entry("2", "o", 0, 400),
            // Alive under the remembered beat (700), but within half its TTL: asked again.
            entry("3", "p", 0, 400),
            // Far from its expiry under the remembered beat (700): not asked again.
            entry("4", "q", 0, 1_000),
        ];
        let mut fresh_asks = Vec::new();
        assert!(s.prune("boot1", now, |owner, fresh| {
            if fresh {
                fresh_asks.push(owner.to_owned());
            }
            Liveness::Beat(match (owner, fresh) {
                ("o", false) => 500,
                (_, false) => 700,
                (_, true) => 900,
            })
        }));
        let expiries: Vec<_> = s.entries.iter().map(|e| (&*e.id, e.expires_ns)).collect();
        assert_eq!(expiries, [("2", 1_300), ("3", 1_300), ("4", 1_700)]);
        assert_eq!(fresh_asks, ["o", "p"]);
    }

    #[test]
    fn roles_and_holder_ids_read_back() {
        for role in [Role::Exclusive, Role::Shared, Role::Permit(7)] {
            let mut e = entry("abc", "o", 0, 1);
            e.role = Entry::role_text(role);
            assert_eq!(e.role(), Some(role));
        }
        let e = entry("abc", "o", 0, 1);
        assert_eq!(entry_id(&e.holder_id()), "abc");
    }
}
