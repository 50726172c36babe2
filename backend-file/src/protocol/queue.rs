//! The steps on one lock's queue, each run inside one transaction (`conn/txn.rs`) on the state it
//! read: join, take a turn, try once, leave. (Renewing is no step: a locker's heartbeat renews all
//! its entries, see `conn/owner.rs`.) Who holds is decided by
//! [`locksmith_core::driver::queue::standing`], the rule of every queue backend, on the whole queue (the
//! file holds it all), so a semaphore or a read-write lock needs no step of its own.

use std::collections::HashMap;

use locksmith_core::driver::fast_hash::FastBuildHasher;
use locksmith_core::driver::queue::{holds_at_tail, standing, Standing};
use locksmith_core::{LockError, Result};

use super::state::{Entry, Grant, Now, State, Text, MAX_TOKEN};

/// What a waiter found.
#[derive(Debug)]
pub(crate) enum Turn {
    /// It holds: its fencing token, and when its lease started (`CLOCK_BOOTTIME` ns).
    Granted(u64, u64),
    /// Not yet: wait until woken, or until this instant (`CLOCK_BOOTTIME` ns: the earliest expiry
    /// of an entry ahead).
    Wait(Option<u64>),
    /// Its entry is not in the queue any more: dropped as expired or dead between the look that
    /// sent it to take its turn and the turn (its process paused for about its TTL), or removed
    /// by hand. It joins again at the tail, as on PostgreSQL.
    Gone,
}

/// Adds `entry` at the tail of the queue and takes its first turn.
pub(crate) fn join(state: &mut State, mut entry: Entry, now: Now) -> Result<Turn> {
    let id = entry.id.clone();
    // In line already (a waiter that took a stale read for its entry gone): one entry only, or
    // the second would wait behind the first forever.
    if state.position(&id).is_none() {
        entry.since_ns = now.boot_ns;
        state.entries.push(entry);
    }
    turn(state, &id, now)
}

/// Entry `id` takes its turn: it holds now if the queue rule says so; [`Turn::Gone`] if it is not
/// in the queue.
pub(crate) fn turn(state: &mut State, id: &str, now: Now) -> Result<Turn> {
    let Some(me) = state.position(id) else {
        return Ok(Turn::Gone);
    };
    if let Some(grant) = state.entries[me].grant {
        return Ok(Turn::Granted(grant.token, state.entries[me].since_ns));
    }
    match standing(&state.roles()?, me) {
        Ok(Standing::Holds) => {
            let token = next_token(state.last_token, now)?;
            Ok(Turn::Granted(grant(state, me, token, now), now.boot_ns))
        }
        Ok(_) => Ok(Turn::Wait(state.entries[..me].iter().map(|e| e.expires_ns).min())),
        Err(e) => {
            state.entries.remove(me);
            Err(e)
        }
    }
}

/// Grants every entry that the queue rule says holds and that has no grant yet: run at the end of
/// every transaction (`conn/txn.rs`), so that the step which frees the lock (a release, a waiter
/// leaving, a dead or expired holder dropped) also hands it over, in the same write. The next
/// holder then finds its grant at its next look at the state, with no step of its own: it never
/// waits behind the releaser's `flock` nor takes a transaction of its own on the hand-over path.
/// What was granted, entry by entry.
///
/// Entries hold in a prefix of the queue (behind one that waits, every entry waits), so the pass
/// stops at the first that waits. An entry whose request the rule refuses (a semaphore's permit
/// count that disagrees) is left to its own turn, which removes it and tells its caller; a token
/// that cannot be handed out (see [`next_token`]) is left to the waiter's turn too, which fails
/// with the reason.
pub(crate) fn hand_over(state: &mut State, now: Now) -> Vec<HandedOver> {
    let Ok(roles) = state.roles() else { return Vec::new() };
    let mut granted = Vec::new();
    for me in 0..state.entries.len() {
        if state.entries[me].grant.is_some() {
            continue;
        }
        if !matches!(standing(&roles, me), Ok(Standing::Holds)) {
            break;
        }
        let Ok(token) = next_token(state.last_token, now) else {
            break;
        };
        grant(state, me, token, now);
        let entry = &state.entries[me];
        granted.push(HandedOver {
            id: entry.id.clone(),
            owner: entry.owner.clone(),
            token,
            since_ns: now.boot_ns,
        });
    }
    granted
}

/// A grant [`hand_over`] made: to entry `id` of locker `owner`, with its fencing token and the
/// start of its lease (`CLOCK_BOOTTIME` ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandedOver {
    pub id: Text,
    pub owner: Text,
    pub token: u64,
    pub since_ns: u64,
}

/// Where a waiter stands in a queue read without the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    /// It would hold if it took its turn now (also when its request would be refused, a
    /// semaphore's permit count: it takes its turn and is told).
    pub would_hold: bool,
    /// The earliest expiry of an entry ahead of it (`CLOCK_BOOTTIME` ns): until then, only a
    /// change of the file can bring its turn (an entry behind it expiring never does).
    pub expiry_ahead: Option<u64>,
    /// Its grant, if it holds already (a release handed the lock over, see [`hand_over`]): its
    /// fencing token and when its lease started (`CLOCK_BOOTTIME` ns).
    pub granted: Option<(u64, u64)>,
}

/// The place of every entry (by id): what waiters check before they take the lock. One pass for
/// all of them (see `look.rs`: asked by each of N waiters, it would cost O(N) each).
pub(crate) fn places(state: &State) -> Result<HashMap<Text, Place, FastBuildHasher>> {
    let roles = state.roles()?;
    let mut expiry_ahead: Option<u64> = None;
    let mut places = HashMap::with_capacity_and_hasher(state.entries.len(), FastBuildHasher::default());
    for (i, e) in state.entries.iter().enumerate() {
        let waits = matches!(standing(&roles, i), Ok(Standing::After(_) | Standing::AfterAny));
        let place = Place {
            would_hold: !waits,
            expiry_ahead,
            granted: e.grant.map(|g| (g.token, e.since_ns)),
        };
        places.insert(e.id.clone(), place);
        expiry_ahead = Some(expiry_ahead.map_or(e.expires_ns, |x| x.min(e.expires_ns)));
    }
    Ok(places)
}

/// One attempt: `entry` joins and holds if it would hold at once (its fencing token); otherwise
/// nothing changes.
pub(crate) fn try_take(state: &mut State, entry: Entry, now: Now) -> Result<Option<u64>> {
    let role = entry.role().ok_or_else(|| LockError::Protocol("unknown role".into()))?;
    if !holds_at_tail(&state.roles()?, role)? {
        return Ok(None);
    }
    let token = next_token(state.last_token, now)?;
    state.entries.push(entry);
    Ok(Some(grant(state, state.entries.len() - 1, token, now)))
}

/// Removes entry `id` (a holder releasing, a waiter leaving); whether it held.
pub(crate) fn leave(state: &mut State, id: &str) -> bool {
    match state.position(id) {
        Some(i) => state.entries.remove(i).grant.is_some(),
        None => false,
    }
}

/// The next fencing token after `last`: one more than the last, and at least the wall clock in
/// microseconds, so that a state that went back (a power cut before an unsynced rename reached
/// the disk, with `sync=off`; a state file removed by hand) still hands out tokens above every
/// earlier one, unless the clock went back too.
///
/// Tokens never pass [`MAX_TOKEN`] (the state file could not be read back, and fenced stores
/// keep signed 64-bit numbers), and never go back: a counter at the limit is
/// [`LockError::Protocol`], and a wall clock past it (hundreds of thousands of years ahead: a
/// clock set wildly wrong) refuses the grant with [`LockError::Unavailable`] rather than hand
/// out a token that would stop the lock for good; it grants again once the clock is right.
fn next_token(last: u64, now: Now) -> Result<u64> {
    let next = last
        .checked_add(1)
        .filter(|next| *next <= MAX_TOKEN)
        .ok_or_else(|| LockError::Protocol(format!("fencing counter {last} has no room for another token")))?;
    if now.unix_micros > MAX_TOKEN {
        tracing::warn!(
            unix_micros = now.unix_micros,
            "file backend: the wall clock is past the range of fencing tokens; grant refused"
        );
        return Err(LockError::Unavailable {
            message: format!(
                "the wall clock ({} µs since the epoch) is past the range of fencing tokens \
                 (at most {MAX_TOKEN}): set the clock right",
                now.unix_micros
            ),
            source: None,
        });
    }
    Ok(next.max(now.unix_micros))
}

/// Grants entry `me` its lease (its TTL counts from now) and fencing token `token` (from
/// [`next_token`]).
fn grant(state: &mut State, me: usize, token: u64, now: Now) -> u64 {
    state.last_token = token;
    let entry = &mut state.entries[me];
    entry.since_ns = now.boot_ns;
    entry.grant = Some(Grant { token });
    token
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::state::Liveness;
    use locksmith_core::driver::Role;

    fn entry(id: &str, role: Role) -> Entry {
        Entry {
            id: id.into(),
            owner: "o".into(),
            pid: 1,
            host: "h".into(),
            role: Entry::role_text(role),
            value: Text::default(),
            since_ns: 0,
            ttl_ns: 1_000,
            grant: None,
            expires_ns: 0,
        }
    }

    #[test]
    fn an_entry_that_joins_again_stays_one_entry() {
        let now = Now::at_boot(0);
        let mut s = State::new("x", "b");
        join(&mut s, entry("1", Role::Exclusive), now).unwrap();
        join(&mut s, entry("2", Role::Exclusive), now).unwrap();
        assert!(matches!(
            join(&mut s, entry("2", Role::Exclusive), now).unwrap(),
            Turn::Wait(_)
        ));
        assert_eq!(s.entries.len(), 2);
        assert!(leave(&mut s, "1"));
        assert!(matches!(turn(&mut s, "2", now).unwrap(), Turn::Granted(..)));
    }

    #[test]
    fn waiters_hold_in_order_with_increasing_tokens() {
        let now = Now::at_boot(0);
        let mut s = State::new("x", "b");
        let Turn::Granted(t1, _) = join(&mut s, entry("1", Role::Exclusive), now).unwrap() else {
            panic!("the first holds")
        };
        assert!(matches!(
            join(&mut s, entry("2", Role::Exclusive), now).unwrap(),
            Turn::Wait(_)
        ));
        let place = places(&s).unwrap()["2"];
        assert!(!place.would_hold);
        assert_eq!(place.expiry_ahead, Some(s.entries[0].expires_ns));
        assert_eq!(try_take(&mut s, entry("3", Role::Exclusive), now).unwrap(), None);
        assert!(leave(&mut s, "1"));
        assert!(places(&s).unwrap()["2"].would_hold);
        let Turn::Granted(t2, since) = turn(&mut s, "2", Now::at_boot(7)).unwrap() else {
            panic!("next")
        };
        assert!(t2 > t1);
        assert_eq!((s.entries[0].since_ns, since), (7, 7), "a grant starts the lease");
        assert!(!leave(&mut s, "1"));
    }

    #[test]
    fn tokens_are_one_more_than_the_last_and_at_least_the_wall_clock() {
        let mut s = State::new("x", "b");
        let at = |micros| Now {
            boot_ns: 0,
            unix_micros: micros,
        };
        assert_eq!(
            try_take(&mut s, entry("1", Role::Shared), at(1_000)).unwrap(),
            Some(1_000)
        );
        assert_eq!(
            try_take(&mut s, entry("2", Role::Shared), at(1_000)).unwrap(),
            Some(1_001)
        );
        // The clock went back: the tokens go on from the last.
        assert_eq!(try_take(&mut s, entry("3", Role::Shared), at(10)).unwrap(), Some(1_002));
        // A state that lost its last tokens (removed, or a power cut with sync=off) starts again
        // at the clock, above them.
        let mut fresh = State::new("x", "b");
        assert_eq!(
            try_take(&mut fresh, entry("4", Role::Shared), at(5_000)).unwrap(),
            Some(5_000)
        );
    }

    /// Bug: a wall clock wildly ahead gave a token above `i64::MAX`, which the state file's
    /// reader refuses (the lock stopped for good). The grant is refused now, changing nothing, and
    /// a counter at the limit fails clearly instead of wrapping.
    #[test]
    fn tokens_never_pass_the_limit_nor_go_back() {
        let wild = Now {
            boot_ns: 0,
            unix_micros: u64::MAX,
        };
        let mut s = State::new("x", "b");
        s.last_token = 41;
        let refused = try_take(&mut s, entry("1", Role::Exclusive), wild);
        assert!(
            matches!(&refused, Err(LockError::Unavailable { message, .. }) if message.contains("wall clock")),
            "{refused:?}"
        );
        assert_eq!(
            (s.last_token, s.entries.len()),
            (41, 0),
            "a refused grant changes nothing"
        );
        // A waiter's turn is refused the same way, and stays in line.
        join(&mut s, entry("1", Role::Exclusive), Now::at_boot(0)).unwrap();
        s.entries[0].grant = None;
        assert!(turn(&mut s, "1", wild).is_err());
        assert_eq!((s.last_token, s.entries.len()), (42, 1));
        // Up to the limit, and not past it.
        let mut s = State::new("x", "b");
        s.last_token = MAX_TOKEN - 1;
        let at = Now::at_boot(0);
        assert_eq!(try_take(&mut s, entry("1", Role::Shared), at).unwrap(), Some(MAX_TOKEN));
        assert!(MAX_TOKEN < i64::MAX.unsigned_abs());
        let full = try_take(&mut s, entry("2", Role::Shared), at);
        assert!(
            matches!(&full, Err(LockError::Protocol(m)) if m.contains("no room")),
            "{full:?}"
        );
        s.last_token = u64::MAX;
        assert!(try_take(&mut s, entry("3", Role::Shared), at).is_err(), "no wrap");
        assert_eq!(s.entries.len(), 1);
    }

    /// A waiter whose look found it would hold, but whose entry the turn's transaction pruned as
    /// expired (its process paused for just under its TTL), is told to join again, not failed.
    #[test]
    fn a_turn_for_an_entry_pruned_meanwhile_says_gone() {
        let mut s = State::new("x", "b");
        let mut waiter = entry("2", Role::Exclusive);
        waiter.ttl_ns = 1_000;
        join(&mut s, entry("1", Role::Exclusive), Now::at_boot(0)).unwrap();
        join(&mut s, waiter, Now::at_boot(0)).unwrap();
        assert!(leave(&mut s, "1"));
        assert!(places(&s).unwrap()["2"].would_hold, "the look says it would hold");
        // The turn's transaction, a little later, drops it as expired.
        let later = Now::at_boot(5_000);
        s.prune("b", later, |_, _| Liveness::Beat(0));
        assert!(s.position("2").is_none(), "pruned");
        assert!(matches!(turn(&mut s, "2", later), Ok(Turn::Gone)));
        assert!(s.entries.is_empty(), "the turn adds nothing");
        let Ok(Turn::Granted(..)) = join(&mut s, entry("2", Role::Exclusive), later) else {
            panic!("joining again holds the free lock")
        };
    }

    #[test]
    fn a_semaphore_mismatch_removes_the_late_entry() {
        let now = Now::at_boot(0);
        let mut s = State::new("x", "b");
        join(&mut s, entry("1", Role::Permit(2)), now).unwrap();
        assert!(join(&mut s, entry("2", Role::Permit(3)), now).is_err());
        assert_eq!(s.entries.len(), 1);
    }
}
