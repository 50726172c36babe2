//! The Redis keys and pub/sub channels of one lock, in both layouts.

use locksmith_core::driver::{BackendUrl, LockName, Role};
use locksmith_core::{Family, LockError, LockKind, Result};

use crate::config::{Config, Layout};

/// The keys of one lock (see the crate docs, "Key layout").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockKeys {
    /// The holder key: a string `<token>:<fencing token>:<ttl ms>` with the lease as its expiry.
    pub lock: String,
    /// The fencing counter: an integer that never expires.
    pub fence: String,
    /// The waiter queue: a sorted set of waiter tokens, scored by arrival.
    pub queue: String,
    /// The waiters' liveness deadlines: a hash from waiter token to the server time (ms) after
    /// which the entry is stale.
    pub alive: String,
    /// The prefix of the waiters' wake-up channels: waiter `t` listens on `<wake>t`.
    pub wake: String,
    /// Plain layout with `poller_gap`: when locksmith clients started handing the lock to each
    /// other without a break (server time in ms).
    pub streak: String,
    /// Plain layout with `poller_gap`: present (with its `PX`) while the lock is left free for
    /// clients that poll.
    pub gap: String,
}

impl LockKeys {
    /// The keys of `name` for the backend at `url` (its `prefix` and `layout` options).
    pub fn for_url(url: &BackendUrl, name: &LockName) -> Result<LockKeys> {
        let config = Config::parse(url)?;
        Ok(LockKeys::new(&config.prefix, config.layout, name))
    }

    pub(crate) fn new(prefix: &str, layout: Layout, name: &LockName) -> LockKeys {
        // Built with one allocation per key, not `format!`: keys are made on every acquire and
        // release, and formatting them was a tenth of the client's work per lock cycle.
        let enc = name.encoded();
        let (lock, base) = match layout {
            Layout::Default => {
                let base = concat(&[prefix, "{", enc, "}"]);
                (concat(&[&base, ":lock"]), base)
            }
            Layout::Plain => {
                let raw = name.as_str();
                let tag = same_slot_tag(raw);
                (raw.to_owned(), concat(&[prefix, "{", &tag, "}:", enc]))
            }
        };
        LockKeys {
            lock,
            fence: concat(&[&base, ":fence"]),
            queue: concat(&[&base, ":queue"]),
            alive: concat(&[&base, ":alive"]),
            wake: concat(&[&base, ":wake:"]),
            streak: concat(&[&base, ":streak"]),
            gap: concat(&[&base, ":gap"]),
        }
    }

    /// The wake-up channel of the waiter with `token`.
    pub(crate) fn channel(&self, token: &str) -> String {
        concat(&[&self.wake, token])
    }

    /// The keys of the acquire scripts (`TRY_ACQUIRE`, `WAIT_STEP`) and of `RELEASE` (which may
    /// hand the lock over), in their order.
    pub(crate) fn lock_script_keys(&self) -> [&str; 6] {
        [
            &self.lock,
            &self.fence,
            &self.queue,
            &self.alive,
            &self.streak,
            &self.gap,
        ]
    }

    /// The keys of `LEAVE`, in its order.
    pub(crate) fn leave_script_keys(&self) -> [&str; 3] {
        [&self.lock, &self.queue, &self.alive]
    }
}

/// The keys of a semaphore, read-write lock or election (default layout only): all of them share
/// the hash tag `{<segment>}` of [`Family::segment`] (`{orders%2F42.sem}`), so each script touches
/// one Redis Cluster slot, and the families of one name never share a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindKeys {
    /// The lock's family.
    pub family: Family,
    /// The holders: a sorted set of entries (`<role>:<token>`) scored by their lease deadline
    /// (server time in ms).
    pub holders: String,
    /// The holders' data: a hash from entry to `<fencing token>:<campaign value>`.
    pub info: String,
    /// The fencing counter (as the mutex's).
    pub fence: String,
    /// The waiter queue: a sorted set of entries scored by arrival.
    pub queue: String,
    /// The waiters' liveness: a sorted set of entries scored by the server time (ms) after which
    /// the entry is stale.
    pub alive: String,
    /// The exclusive waiters (writers, candidates), scored as in the queue: what readers check.
    pub writers: String,
    /// The prefix of the waiters' wake-up channels: the waiter with token `t` listens on `<wake>t`.
    pub wake: String,
    /// The channel on which an election announces every change of its leader.
    pub leader: String,
}

impl KindKeys {
    /// The keys of `family`'s lock `name` for the backend at `url` (its `prefix` option);
    /// [`LockError::InvalidOption`] for the mutex (see [`LockKeys`]) or the plain layout.
    pub fn for_url(url: &BackendUrl, family: Family, name: &LockName) -> Result<KindKeys> {
        let config = Config::parse(url)?;
        if family == Family::Mutex || config.layout == Layout::Plain {
            return Err(LockError::InvalidOption(format!(
                "no {} keys in the {:?} layout",
                family.name(),
                config.layout
            )));
        }
        Ok(KindKeys::new(&config.prefix, family, name))
    }

    pub(crate) fn new(prefix: &str, family: Family, name: &LockName) -> KindKeys {
        let base = concat(&[prefix, "{", name.encoded(), family.suffix(), "}"]);
        KindKeys {
            family,
            holders: concat(&[&base, ":holders"]),
            info: concat(&[&base, ":info"]),
            fence: concat(&[&base, ":fence"]),
            queue: concat(&[&base, ":queue"]),
            alive: concat(&[&base, ":alive"]),
            writers: concat(&[&base, ":writers"]),
            wake: concat(&[&base, ":wake:"]),
            leader: concat(&[&base, ":leader"]),
        }
    }

    /// The wake-up channel of the waiter with `token`.
    pub(crate) fn channel(&self, token: &str) -> String {
        concat(&[&self.wake, token])
    }

    /// The keys of the lock scripts (`lua/kinds/state.lua`), in their order.
    pub(crate) fn script_keys(&self) -> [&str; 6] {
        [
            &self.holders,
            &self.info,
            &self.fence,
            &self.queue,
            &self.alive,
            &self.writers,
        ]
    }

    /// The scripts' leader channel argument: the channel for an election, `""` otherwise.
    pub(crate) fn announce(&self) -> &str {
        if self.family == Family::Election {
            &self.leader
        } else {
            ""
        }
    }
}

/// The entry of the holder or waiter with `token` asking for `kind`: `X:<token>` (exclusive),
/// `S:<token>` (shared) or `P<n>:<token>` (one of `n` permits).
pub(crate) fn entry(kind: &LockKind, token: &str) -> String {
    match kind.role() {
        Role::Exclusive => format!("X:{token}"),
        Role::Shared => format!("S:{token}"),
        Role::Permit(n) => format!("P{n}:{token}"),
    }
}

/// A hash tag whose slot is `key`'s: [`slot_tag`], else one from [`tag_for_slot`].
pub(crate) fn same_slot_tag(key: &str) -> String {
    slot_tag(key).map_or_else(|| tag_for_slot(slot_of(key)), str::to_owned)
}

/// The hash tag that puts a key in the same Redis Cluster slot as the raw key `key`: the key's own
/// `{tag}` if it has one, else the whole key, unless `{key}` would be cut short by a `}` inside it
/// (then `None`, and [`tag_for_slot`] finds another tag of the same slot).
fn slot_tag(key: &str) -> Option<&str> {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return Some(&key[open + 1..open + 1 + len]);
            }
        }
    }
    (!key.contains('}')).then_some(key)
}

/// A short tag (`~0`, `~1`, … in base 36) whose slot is `slot`: the first one of that sequence,
/// so every client finds the same. Some 16 thousand tries at most on average; only names with a
/// `}` and no `{tag}` of their own need it.
fn tag_for_slot(slot: u16) -> String {
    (0u64..)
        .map(|n| format!("~{}", base36(n)))
        .find(|tag| slot_of(tag) == slot)
        .unwrap_or_default()
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the text between its first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match key.find('{') {
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16_xmodem(hashed) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The parts, joined into a string allocated once at its final size.
fn concat(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(layout: Layout, name: &str) -> LockKeys {
        LockKeys::new("ls:", layout, &LockName::new(name).unwrap())
    }

    #[test]
    fn default_layout_shares_one_hash_tag() {
        let k = keys(Layout::Default, "orders/42");
        assert_eq!(k.lock, "ls:{orders%2F42}:lock");
        assert_eq!(k.fence, "ls:{orders%2F42}:fence");
        assert_eq!(k.queue, "ls:{orders%2F42}:queue");
        assert_eq!(k.channel("t"), "ls:{orders%2F42}:wake:t");
    }

    #[test]
    fn plain_layout_uses_the_raw_name() {
        let k = keys(Layout::Plain, "orders/42");
        assert_eq!(k.lock, "orders/42");
        assert_eq!(k.fence, "ls:{orders/42}:orders%2F42:fence");
        assert_eq!(keys(Layout::Plain, "x{user1}y").fence, "ls:{user1}:x%7Buser1%7Dy:fence");
        // `{a}b}` would hash `a`: another tag of the slot of `a}b` is used.
        let odd = keys(Layout::Plain, "a}b");
        assert!(
            odd.fence.starts_with("ls:{~") && odd.fence.ends_with("}:a%7Db:fence"),
            "{}",
            odd.fence
        );
        assert_eq!(slot_of(&odd.fence), slot_of("a}b"));
    }

    #[test]
    fn cluster_slots() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
        assert_eq!(slot_of("{}x"), slot_of("{}x"));
        assert_ne!(slot_of("{}a"), slot_of("a"));
        for layout in [Layout::Default, Layout::Plain] {
            for name in ["orders/42", "x{user1}y", "a}b", "}{", "x}{y}", "{", "{}", "plain"] {
                let k = keys(layout, name);
                let slot = slot_of(&k.lock);
                for key in [&k.fence, &k.queue, &k.alive, &k.streak, &k.gap] {
                    assert_eq!(
                        slot_of(key),
                        slot,
                        "{layout:?} {name}: {key} is in another slot than {}",
                        k.lock
                    );
                }
            }
        }
    }

    #[test]
    fn kinds_have_keys_of_their_own_in_one_slot() {
        let name = LockName::new("orders/42").unwrap();
        let sem = KindKeys::new("ls:", Family::Semaphore, &name);
        assert_eq!(sem.holders, "ls:{orders%2F42.sem}:holders");
        assert_eq!(sem.channel("t"), "ls:{orders%2F42.sem}:wake:t");
        assert_eq!(sem.announce(), "");
        let elect = KindKeys::new("ls:", Family::Election, &name);
        assert_eq!(elect.announce(), "ls:{orders%2F42.elect}:leader");
        let mutex = keys(Layout::Default, "orders/42");
        for family in [Family::Semaphore, Family::RwLock, Family::Election] {
            let k = KindKeys::new("ls:", family, &name);
            let slot = slot_of(&k.holders);
            for key in [&k.info, &k.fence, &k.queue, &k.alive, &k.writers, &k.leader] {
                assert_eq!(slot_of(key), slot, "{key}");
                assert!(![&mutex.lock, &mutex.fence, &mutex.queue, &mutex.alive].contains(&key));
            }
        }
        assert_eq!(entry(&LockKind::Permit { permits: 3 }, "ab"), "P3:ab");
        assert_eq!(entry(&LockKind::Read, "ab"), "S:ab");
        assert_eq!(entry(&LockKind::Write, "ab"), "X:ab");
    }

    #[test]
    fn names_never_share_keys() {
        for layout in [Layout::Default, Layout::Plain] {
            let mut seen = std::collections::HashSet::new();
            for n in ["a", "a/b", "ab", "a/", "a:lock", "{a}", "a}", "x.y", "x%2Ey"] {
                let k = keys(layout, n);
                for key in [k.lock, k.fence, k.queue, k.alive, k.streak, k.gap] {
                    assert!(seen.insert(key.clone()), "{layout:?}: {key} is shared");
                }
            }
        }
    }
}
