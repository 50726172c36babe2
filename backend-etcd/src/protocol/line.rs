//! The requests of the queue protocol for entries that share a lock (a semaphore's permits, a
//! read-write lock's readers), each one round trip: join and read the queue, read it again, touch
//! one's key.
//!
//! Such an entry's standing depends on what the entries ahead of it are, so these requests read
//! the queue ahead with values (the [`crate::protocol::kinds`] of each entry), where the mutex protocol
//! ([`crate::protocol::requests`]) reads two or three keys.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};
use locksmith_core::driver::queue::{standing, Standing};
use locksmith_core::driver::Role;
use locksmith_core::{Family, LockError, Result};

use crate::conn::Conn;
use crate::protocol::kinds::role_of;
use crate::protocol::requests::{gets, oldest_first, revision, run, QueueKey};

/// A key's view of its queue: every entry up to and including it, in arrival order.
#[derive(Debug)]
pub(crate) struct Line {
    /// The entries from the oldest to the key itself (the last), with what each one is.
    pub entries: Vec<(QueueKey, Role)>,
    /// How many keys were created after it (as of the same read).
    pub behind: usize,
}

/// What a waiting entry waits for: the one event after which its standing may have changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The entry holds: nothing to wait for.
    None,
    /// The deletion of this key (and, when `touch`, a put to it: a semaphore waiter ahead that
    /// became a holder says so by touching its key).
    Key {
        /// The key waited for.
        key: QueueKey,
        /// Whether a put to it matters too.
        touch: bool,
    },
    /// The deletion of any of these keys (a semaphore's first waiter: any permit given back).
    AnyOf(Vec<Vec<u8>>),
}

impl Line {
    fn from_kvs(kvs: &[KeyValue], key: &str, family: Family, mine: Role, total: usize) -> Result<Self> {
        let me = kvs
            .iter()
            .position(|kv| kv.key() == key.as_bytes())
            .ok_or_else(|| LockError::Protocol(format!("the queue read misses its own key {key}")))?;
        let entries = kvs[..=me]
            .iter()
            .enumerate()
            .map(|(i, kv)| {
                let role = if i == me { mine } else { role_of(family, kv.value()) };
                (QueueKey::from_kv(kv), role)
            })
            .collect();
        Ok(Line {
            entries,
            behind: total.saturating_sub(me + 1),
        })
    }

    /// Where the key stands ([`standing`]; a semaphore permit count that disagrees with an
    /// entry ahead is [`LockError::InvalidOption`]).
    pub fn standing(&self) -> Result<Standing> {
        let roles: Vec<Role> = self.entries.iter().map(|(_, role)| *role).collect();
        standing(&roles, roles.len().saturating_sub(1))
    }

    /// What the key waits for, as [`Line::standing`] says.
    pub fn target(&self) -> Result<Target> {
        let me = self.entries.len().saturating_sub(1);
        let touch = matches!(self.entries.last(), Some((_, Role::Permit(_))));
        Ok(match self.standing()? {
            Standing::Holds => Target::None,
            Standing::After(i) => match self.entries.get(i) {
                Some((key, _)) => Target::Key {
                    key: key.clone(),
                    touch,
                },
                None => return Err(LockError::Protocol(format!("queue entry {i} of {me} is missing"))),
            },
            Standing::AfterAny => Target::AnyOf(self.entries[..me].iter().map(|(k, _)| k.key.clone()).collect()),
        })
    }
}

/// Joins the queue in one transaction: creates `key` with `value` and the lease unless it exists
/// (then it is taken as ours, as in [`crate::protocol::requests::join`]) and reads the whole queue with
/// values. Returns the key's create revision and its line; `mine` is the key's own role.
pub(crate) async fn enter(
    conn: &Conn,
    prefix: &str,
    key: &str,
    lease: i64,
    value: &str,
    family: Family,
    mine: Role,
) -> Result<(i64, Line)> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix, Some(oldest_first())),
        ])
        .or_else([TxnOp::get(prefix, Some(oldest_first()))]);
    let resp = run(conn, "joining the lock queue", txn).await?;
    let gets = gets(&resp);
    let kvs = gets.first().map(|g| g.kvs()).unwrap_or_default();
    let rev = if resp.succeeded() {
        revision(&resp)?
    } else {
        kvs.iter()
            .find(|kv| kv.key() == key.as_bytes())
            .map(|kv| kv.create_revision())
            .ok_or_else(|| LockError::Protocol("the queue key vanished in a transaction".into()))?
    };
    Ok((rev, Line::from_kvs(kvs, key, family, mine, kvs.len())?))
}

/// Reads the queue again for `key` (created at `rev`), in one transaction: the entries up to it
/// with values, and how many keys there are in all. `None` when the key is gone.
pub(crate) async fn look(
    conn: &Conn,
    prefix: &str,
    key: &str,
    rev: i64,
    family: Family,
    mine: Role,
) -> Result<Option<Line>> {
    // etcd 3.4 counts a range before the create-revision filters apply, so the keys behind are
    // the total count minus the entries up to ours (both read at one revision).
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, rev)])
        .and_then([
            TxnOp::get(prefix, Some(oldest_first().with_max_create_revision(rev))),
            TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_count_only())),
        ]);
    let resp = run(conn, "looking at the lock queue", txn).await?;
    if !resp.succeeded() {
        return Ok(None);
    }
    let gets = gets(&resp);
    let kvs = gets.first().map(|g| g.kvs()).unwrap_or_default();
    let total = gets
        .get(1)
        .map_or(0, |g| usize::try_from(g.count()).unwrap_or(usize::MAX));
    Line::from_kvs(kvs, key, family, mine, total).map(Some)
}

/// What the first request of a semaphore's `try_acquire` found.
#[derive(Debug)]
pub(crate) enum Found {
    /// The queue was empty: the key was created at this revision, and holds.
    Took(i64),
    /// The queue, read at `revision`: what each entry is, oldest first.
    Queue {
        /// Every entry's role.
        roles: Vec<Role>,
        /// The revision of the read.
        revision: i64,
    },
}

/// A semaphore permit's try, first request: creates `key` if the queue is empty, otherwise reads
/// it (writing nothing).
pub(crate) async fn take_or_read(conn: &Conn, prefix: &str, key: &str, lease: i64, value: &str) -> Result<Found> {
    let txn = Txn::new()
        .when([Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()])
        .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))])
        .or_else([TxnOp::get(prefix, Some(oldest_first()))]);
    let resp = run(conn, "trying to take a permit", txn).await?;
    let revision = revision(&resp)?;
    if resp.succeeded() {
        return Ok(Found::Took(revision));
    }
    let gets = gets(&resp);
    let kvs = gets.first().map(|g| g.kvs()).unwrap_or_default();
    let roles = kvs.iter().map(|kv| role_of(Family::Semaphore, kv.value())).collect();
    Ok(Found::Queue { roles, revision })
}

/// A semaphore permit's try, second request: creates `key` if no key under `prefix` was created
/// or changed after `read_rev` (deletions do not matter: they only make room). `None` (nothing
/// written) if one was.
pub(crate) async fn take_if_unchanged(
    conn: &Conn,
    prefix: &str,
    key: &str,
    lease: i64,
    value: &str,
    read_rev: i64,
) -> Result<Option<i64>> {
    // Over a range, a compare holds if it holds for every key in it (and a mod revision compare
    // holds over an empty range: a missing key's mod revision is 0).
    let txn = Txn::new()
        .when([
            Compare::mod_revision(prefix, CompareOp::Less, read_rev.saturating_add(1)).with_prefix(),
            Compare::create_revision(key, CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))]);
    let resp = run(conn, "trying to take a permit", txn).await?;
    Ok(if resp.succeeded() { Some(revision(&resp)?) } else { None })
}

/// A reader's try, in one transaction that writes nothing when it fails: creates `key` if every
/// key of the queue is a reader's (then no writer holds or waits) or the queue is empty.
/// Returns the key's create revision.
pub(crate) async fn read_if_no_writer(
    conn: &Conn,
    prefix: &str,
    key: &str,
    lease: i64,
    value: &str,
) -> Result<Option<i64>> {
    let put = || TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
    // A value compare over a range holds if every key in it has that value, and fails over an
    // empty range (a missing key has no value); the inner transaction covers the empty queue.
    let if_empty = Txn::new()
        .when([Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()])
        .and_then([put()]);
    let txn = Txn::new()
        .when([Compare::value(prefix, CompareOp::Equal, value).with_prefix()])
        .and_then([put()])
        .or_else([TxnOp::txn(if_empty)]);
    let resp = run(conn, "trying to take the read side", txn).await?;
    let took = resp.succeeded()
        || resp.op_responses().into_iter().any(|r| match r {
            etcd_client::TxnOpResponse::Txn(inner) => inner.succeeded(),
            _ => false,
        });
    Ok(if took { Some(revision(&resp)?) } else { None })
}

/// Touches `key` (created at `rev`): puts its value again, so that a watch on it fires. `false`
/// when the key is gone.
pub(crate) async fn touch(conn: &Conn, key: &str, rev: i64, value: &str, lease: i64) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, rev)])
        .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))]);
    Ok(run(conn, "touching a queue key", txn).await?.succeeded())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(roles: &[Role], behind: usize) -> Line {
        let entries = roles
            .iter()
            .enumerate()
            .map(|(i, role)| {
                let key = QueueKey {
                    key: format!("k{i}").into_bytes(),
                    create_rev: i as i64 + 1,
                    lease: 1,
                };
                (key, *role)
            })
            .collect();
        Line { entries, behind }
    }

    #[test]
    fn targets_follow_the_grant_rule() {
        use Role::*;
        assert_eq!(line(&[Shared, Shared], 0).target().unwrap(), Target::None);
        let reader = line(&[Shared, Exclusive, Shared, Shared], 0).target().unwrap();
        assert!(matches!(reader, Target::Key { key, touch: false } if key.key == b"k1"));
        let permits = [Permit(2); 3];
        assert_eq!(
            line(&permits, 0).target().unwrap(),
            Target::AnyOf(vec![b"k0".to_vec(), b"k1".to_vec()])
        );
        let fourth = line(&[Permit(2); 4], 0).target().unwrap();
        assert!(matches!(fourth, Target::Key { key, touch: true } if key.key == b"k2"));
        assert!(matches!(
            line(&[Permit(3), Permit(2)], 0).target(),
            Err(LockError::InvalidOption(_))
        ));
    }
}
