//! Guarded writes ([`locksmith_core::Guarded`]): one script (`lua/guarded/write.lua`) that checks the
//! lease and applies the write in the same atomic step: a mutex's lock key must still hold the
//! holder's token (the compare of compare-and-delete), another kind's holders set must still
//! have the holder's entry with a deadline in the future (the server's clock). With
//! `min_replicas`, a write that applied is confirmed with `WAIT` like a grant: fewer
//! acknowledgements are an error, since a failover could lose it.
//!
//! A write whose connection dropped is sent again, as every request is (see
//! `Node::bounded_sends`); the script checks the lease again, so a second run never writes for a
//! lease that ended. A second run that does not apply cannot tell whether the first did (a
//! compare-and-set would find its own value), and the write says so as `Unavailable`.
//!
//! On Redis Cluster the data key must be in its lock's hash slot (a script's keys share one
//! slot): give it the lock key's hash tag. A quorum of independent masters has no single store to
//! write to, so it refuses guarded writes.

use locksmith_core::driver::{refuse_if_inside, validate_key, GuardedWrite, Lease, LockName};
use locksmith_core::{Family, LockError, LockKind, Result};

use crate::config::{Layout, Topology, DATA_PREFIX, DEFAULT_PREFIX};
use crate::conn::inner::Inner;
use crate::layout::{same_slot_tag, slot_of, KindKeys};
use crate::protocol::kinds::KindEntry;
use crate::protocol::scripts::SCRIPTS;

/// Applies `write` if `lease` still holds (see the module docs).
pub(crate) async fn write(inner: &Inner, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
    if inner.is_quorum() {
        return Err(LockError::InvalidOption(
            "guarded writes need one authoritative Redis (a single server, Sentinel or Cluster); \
             a quorum of independent masters has no single store to write to"
                .into(),
        ));
    }
    let (mode, holder_key, member) = if lease.kind == LockKind::Mutex {
        ("m", inner.keys(&lease.name).lock, lease.holder_id.clone())
    } else {
        inner.check_family(lease.kind.family())?;
        let entry = KindEntry::of_lease(inner, lease);
        ("k", entry.keys.holders.clone(), entry.member().to_owned())
    };
    let key = write.key();
    check_key(inner, key, &holder_key)?;
    let node = &inner.nodes[0];
    let mut call = node.call(&SCRIPTS.guarded_write, &[holder_key.as_str(), key]);
    call.arg(mode).arg(&member);
    match write {
        GuardedWrite::Put { value, .. } => call.arg("put").arg(value.as_slice()),
        GuardedWrite::Delete { .. } => call.arg("del"),
        GuardedWrite::CompareAndSet { expected, value, .. } => match expected {
            Some(expected) => call.arg("cas").arg(value.as_slice()).arg("1").arg(expected.as_slice()),
            None => call.arg("cas").arg(value.as_slice()).arg("0"),
        },
        _ => return Err(LockError::InvalidOption(format!("Redis cannot apply {write:?}"))),
    };
    let ((reply, acks), resent) = node.run_confirmed("a guarded write", key, &call).await?;
    if let Some(acks) = node.too_few(acks) {
        return Err(node.unconfirmed("a guarded write", acks));
    }
    match (reply.first(), resent) {
        (Some(1), _) => Ok(true),
        // Sent twice (see `Node::bounded_sends`): a second run that did not apply cannot tell
        // whether the first did (a compare-and-set then finds its own value, a delete nothing).
        (Some(-1 | 0), true) => Err(LockError::Unavailable {
            message: format!(
                "a guarded write on redis at {}: the connection dropped with the write sent, and \
                 sent again it did not apply: whether the first send applied it cannot be told \
                 (read the key before writing again)",
                node.link.describe(&node.addr)
            ),
            source: None,
        }),
        (Some(-1), false) => Err(LockError::not_held(lease.name.as_str())),
        (Some(0), false) => Ok(false),
        _ => Err(LockError::Protocol(format!(
            "unexpected reply {reply:?} from the guarded write script"
        ))),
    }
}

/// The key `suffix` of lock `lock` ([`locksmith_core::driver::LockBackend::data_key`]):
/// `locksmith-data:{<tag>}:<namespace><segment>:<encoded suffix>`, the tag putting it in the slot
/// of the lock's holder key (the key the guarded-write script checks), and `<namespace>` telling
/// apart locks of one name that are different locks (see [`data_namespace`]).
pub(crate) fn data_key(inner: &Inner, family: Family, lock: &LockName, suffix: &str) -> Result<String> {
    let holder = match family {
        Family::Mutex => inner.keys(lock).lock,
        _ => KindKeys::new(&inner.config.prefix, family, lock).holders,
    };
    let suffix = LockName::new(suffix)?;
    let key = format!(
        "{DATA_PREFIX}{{{}}}:{}{}:{}",
        same_slot_tag(&holder),
        data_namespace(inner.config.layout, &inner.config.prefix),
        family.segment(lock),
        suffix.encoded()
    );
    validate_key(&key)?;
    check_key(inner, &key, &holder)?;
    Ok(key)
}

/// Refuses a key of locksmith's own under `prefix`: every key that begins with the prefix, but a
/// data key (a prefix such as `lock` begins `locksmith-data:` too), and with an empty prefix every
/// key that begins with a hash tag (a lock's keys are `<prefix>{<name>}:…`).
fn refuse_locksmith_keys(key: &str, prefix: &str) -> Result<()> {
    if key.starts_with(DATA_PREFIX) {
        return Ok(());
    }
    refuse_if_inside(key, prefix)?;
    refuse_if_inside(key, &format!("{prefix}{{"))
}

/// What sets a lock's data keys apart from those of other locks of the same name: nothing in the
/// default layout with the default prefix (the keys of earlier releases); `p=<prefix>:` with
/// another prefix (two applications' `prefix=app1:` and `prefix=app2:` locks of one name are
/// two locks); `plain:` in the plain layout (its mutex is the bare name, whatever the prefix:
/// one lock for every prefix, and not the default layout's lock of that name). The prefix is
/// percent-encoded (`%`, `:`), so that a data key has one field more than an unqualified one and
/// the two forms never meet (segments and suffixes are encoded names, without `:`).
fn data_namespace(layout: Layout, prefix: &str) -> String {
    match layout {
        Layout::Plain => "plain:".to_owned(),
        Layout::Default if prefix == DEFAULT_PREFIX => String::new(),
        Layout::Default => format!("p={}:", prefix.replace('%', "%25").replace(':', "%3A")),
    }
}

/// Reads `key` (a plain `GET`).
pub(crate) async fn read(inner: &Inner, key: &str) -> Result<Option<Vec<u8>>> {
    refuse_locksmith_keys(key, &inner.config.prefix)?;
    let node = &inner.nodes[0];
    node.bounded("reading a guarded key", || async move {
        let mut conn = node.link.conn().await?;
        redis::cmd("GET").arg(key).query_async(&mut conn).await
    })
    .await
}

/// A data key outside locksmith's keys, in its lock's slot on a Cluster.
fn check_key(inner: &Inner, key: &str, holder_key: &str) -> Result<()> {
    refuse_locksmith_keys(key, &inner.config.prefix)?;
    if key == holder_key {
        return Err(LockError::InvalidName(format!(
            "the guarded key {key:?} is its own lock's key: lock keys are not data"
        )));
    }
    if matches!(inner.config.topology, Topology::Cluster { .. }) && slot_of(key) != slot_of(holder_key) {
        return Err(LockError::InvalidName(format!(
            "on Redis Cluster a guarded key must be in its lock's hash slot ({}); {key:?} is in slot {}: \
             give it the hash tag of the lock key {holder_key:?}",
            slot_of(holder_key),
            slot_of(key)
        )));
    }
    Ok(())
}
