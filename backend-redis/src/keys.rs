//! The Redis keys and pub/sub channels of one lock, in both layouts.

use lockcore::{BackendUrl, LockName, Result};

use crate::config::{Config, Layout};

/// The keys of one lock (see the crate docs, "Key layout").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockKeys {
    /// The holder key: a string `<token>:<fencing token>` with the lease as its expiry.
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
        let enc = name.encoded();
        let (lock, base) = match layout {
            Layout::Default => {
                let base = format!("{prefix}{{{enc}}}");
                (format!("{base}:lock"), base)
            }
            Layout::Plain => {
                let tag = slot_tag(name.as_str()).unwrap_or(enc);
                (name.as_str().to_owned(), format!("{prefix}{{{tag}}}:{enc}"))
            }
        };
        LockKeys {
            lock,
            fence: format!("{base}:fence"),
            queue: format!("{base}:queue"),
            alive: format!("{base}:alive"),
            wake: format!("{base}:wake:"),
            streak: format!("{base}:streak"),
            gap: format!("{base}:gap"),
        }
    }

    /// The wake-up channel of the waiter with `token`.
    pub(crate) fn channel(&self, token: &str) -> String {
        format!("{}{token}", self.wake)
    }
}

/// The hash tag that puts a key in the same Redis Cluster slot as the raw key `key`: the key's own
/// `{tag}` if it has one, else the whole key, unless `{key}` would be cut short by a `}` inside it
/// (then `None`: no sibling key can share its slot, which only matters on Redis Cluster).
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
        assert_eq!(keys(Layout::Plain, "a}b").fence, "ls:{a%7Db}:a%7Db:fence");
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
