//! `locksmith inspect NAME`: who holds a lock and how many wait — for every kind of lock of that
//! name in use (the mutex, the semaphore, the read-write lock, the election).

use locksmith::{Family, HolderInfo, Leader, LockError, Locker};
use serde_json::{json, Value};

use crate::exit::Failure;
use crate::output::{human, millis};
use crate::session::Session;

/// What `inspect` found of one kind of lock named NAME.
#[derive(Debug)]
pub struct KindReport {
    /// Which kind.
    pub family: Family,
    /// Its holder and waiter entries (as `list` counts them).
    pub entries: usize,
    /// How many hold it, where known (`None`: a semaphore's or read-write lock's entries are not
    /// told apart by the library).
    pub holders: Option<usize>,
    /// How many wait, where known.
    pub waiters: Option<usize>,
    /// The mutex's holder.
    pub holder: Option<HolderInfo>,
    /// The election's leader.
    pub leader: Option<Leader>,
}

impl KindReport {
    /// Whether someone holds it.
    pub fn held(&self) -> bool {
        self.holders.map_or(self.entries > 0, |h| h > 0)
    }
}

/// Prints, for every kind of lock named NAME that someone holds or waits for, who holds it and
/// how many wait; `held: no` when none is in use. `--timeout` bounds the whole command (exit 3
/// when the backend does not answer within it).
pub async fn inspect(session: &Session, name: &str) -> Result<u8, Failure> {
    session.reject_ttl("inspect")?;
    let locker = session.connect().await?;
    let reports = session.within_timeout(report(&locker, name)).await?;
    for kind in &reports {
        session
            .out
            .result(text(name, kind, reports.len() > 1), value(name, kind));
    }
    Ok(0)
}

/// What is in use under `name`, one report per kind (the mutex first), or the free mutex's
/// report when nothing is: the mutex from [`Locker::inspect`], the election from its leader, and
/// the other kinds from [`Locker::list`] (a backend or layout that cannot list has mutexes only).
pub async fn report(locker: &Locker, name: &str) -> Result<Vec<KindReport>, LockError> {
    let mutex = locker.inspect(name).await?;
    let listed = match locker.list(name).await {
        Ok(listed) => listed,
        Err(LockError::InvalidOption(why)) => {
            tracing::debug!(%why, "this backend cannot list its locks: showing the mutex only");
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    let mutex_entries = mutex.waiters.saturating_add(usize::from(mutex.holder.is_some()));
    let mut reports = vec![KindReport {
        family: Family::Mutex,
        entries: mutex_entries,
        holders: Some(usize::from(mutex.holder.is_some())),
        waiters: Some(mutex.waiters),
        holder: mutex.holder,
        leader: None,
    }];
    for lock in listed
        .into_iter()
        .filter(|l| l.name == name && l.family != Family::Mutex)
    {
        let (holders, waiters, leader) = match lock.family {
            Family::Election => {
                let leader = locker.election(name).leader().await?;
                let holders = usize::from(leader.is_some());
                (Some(holders), Some(lock.entries.saturating_sub(holders)), leader)
            }
            family => {
                let counts = split(family, lock.entries);
                (counts.map(|(h, _)| h), counts.map(|(_, w)| w), None)
            }
        };
        reports.push(KindReport {
            family: lock.family,
            entries: lock.entries,
            holders,
            waiters,
            holder: None,
            leader,
        });
    }
    // The free mutex is shown only when nothing else is in use.
    if reports.len() > 1 && reports[0].entries == 0 {
        reports.remove(0);
    }
    Ok(reports)
}

/// How many of a listed lock's `entries` hold it and how many wait, where that is known: one
/// holder of a mutex or an election (the first entry of its queue), the rest wait; a semaphore or
/// a read-write lock with one entry or none (the first entry holds); `None` for a semaphore or a
/// read-write lock with more (`list` counts their entries without telling them apart).
pub fn split(family: Family, entries: usize) -> Option<(usize, usize)> {
    match family {
        Family::Mutex | Family::Election => Some((entries.min(1), entries.saturating_sub(1))),
        _ if entries <= 1 => Some((entries, 0)),
        _ => None,
    }
}

/// The report as `key: value` lines; with `kind: ...` when several kinds are in use or the kind
/// is not the mutex.
fn text(name: &str, kind: &KindReport, several: bool) -> String {
    let unknown = || "unknown".to_owned();
    let mut lines = vec![format!("name: {}", crate::output::field(name))];
    if several || kind.family != Family::Mutex {
        lines.push(format!("kind: {}", kind.family.name()));
    }
    lines.push(format!("held: {}", if kind.held() { "yes" } else { "no" }));
    if let Some(h) = &kind.holder {
        lines.push(format!("holder: {}", crate::output::field(&h.holder_id)));
        lines.push(format!(
            "fencing token: {}",
            h.fencing_token.map_or_else(unknown, |t| t.to_string())
        ));
        lines.push(format!(
            "ttl remaining: {}",
            h.ttl_remaining.map_or_else(unknown, human)
        ));
    }
    if let Some(l) = &kind.leader {
        lines.push(format!("leader: {}", crate::output::field(&l.value)));
        lines.push(format!("holder: {}", crate::output::field(&l.holder_id)));
        lines.push(format!("term: {}", l.term));
    }
    match (kind.holders, kind.waiters) {
        (Some(holders), Some(waiters)) => {
            if kind.family != Family::Mutex {
                lines.push(format!("holders: {holders}"));
            }
            lines.push(format!("waiters: {waiters}"));
        }
        _ => lines.push(format!("holders and waiters: {}", kind.entries)),
    }
    let mut text = lines.join("\n");
    if several {
        text.push('\n'); // a blank line between the kinds
    }
    text
}

/// The report as one JSON object.
fn value(name: &str, kind: &KindReport) -> Value {
    let holder = kind.holder.as_ref();
    json!({
        "name": name,
        "kind": kind.family.name(),
        "held": kind.held(),
        "holders": kind.holders,
        "waiters": kind.waiters,
        "entries": kind.entries,
        "holder_id": holder.map(|h| h.holder_id.clone()).or_else(|| kind.leader.as_ref().map(|l| l.holder_id.clone())),
        "fencing_token": holder.and_then(|h| h.fencing_token).or_else(|| kind.leader.as_ref().map(|l| l.term)),
        "ttl_remaining_ms": holder.and_then(|h| h.ttl_remaining).map(millis),
        "leader": kind.leader.as_ref().map(|l| l.value.clone()),
        "term": kind.leader.as_ref().map(|l| l.term),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use locksmith::LockKind;

    /// How long a look may take at most.
    const LOOK: Duration = Duration::from_secs(5);

    async fn kinds(locker: &Locker, name: &str) -> Vec<(Family, Option<usize>, Option<usize>, usize)> {
        tokio::time::timeout(LOOK, report(locker, name))
            .await
            .expect("inspect answers")
            .expect("inspect succeeds")
            .iter()
            .map(|r| (r.family, r.holders, r.waiters, r.entries))
            .collect()
    }

    /// Every kind in use shows, held, on the in-process store; a free name shows the free mutex.
    #[tokio::test]
    async fn every_kind_in_use_is_reported() {
        let locker = locksmith::connect("mem://cli-inspect-kinds").await.expect("mem://");
        assert_eq!(kinds(&locker, "free").await, [(Family::Mutex, Some(0), Some(0), 0)]);

        let permit = |n| locker.request("sem", LockKind::Permit { permits: n }).try_acquire();
        let (p1, p2) = (permit(2).await.unwrap(), permit(2).await.unwrap());
        assert!(p1.is_some() && p2.is_some(), "two permits of two");
        let full = kinds(&locker, "sem").await;
        assert_eq!(full, [(Family::Semaphore, None, None, 2)]);

        let read = |name| locker.request(name, LockKind::Read).try_acquire();
        let (r1, r2) = (read("rw-read").await.unwrap(), read("rw-read").await.unwrap());
        assert!(r1.is_some() && r2.is_some(), "two readers");
        assert_eq!(kinds(&locker, "rw-read").await, [(Family::RwLock, None, None, 2)]);
        let write = locker.request("rw-write", LockKind::Write).try_acquire().await.unwrap();
        assert!(write.is_some());
        assert_eq!(
            kinds(&locker, "rw-write").await,
            [(Family::RwLock, Some(1), Some(0), 1)]
        );

        let leader = LockKind::Leader { value: "me".into() };
        let led = locker.request("both", leader).try_acquire().await.unwrap();
        assert!(led.is_some());
        let mutex = locker.request("both", LockKind::Mutex).try_acquire().await.unwrap();
        assert!(mutex.is_some());
        let both = tokio::time::timeout(LOOK, report(&locker, "both"))
            .await
            .unwrap()
            .unwrap();
        let families: Vec<Family> = both.iter().map(|r| r.family).collect();
        assert_eq!(families, [Family::Mutex, Family::Election]);
        assert!(both.iter().all(KindReport::held), "{both:?}");
        assert_eq!(both[1].leader.as_ref().map(|l| l.value.as_str()), Some("me"));
        assert_eq!((both[1].holders, both[1].waiters), (Some(1), Some(0)));
        assert!(text("both", &both[1], true).contains("kind: election\nheld: yes\nleader: me"));
    }

    #[test]
    fn mutexes_and_elections_split_their_entries() {
        assert_eq!(split(Family::Mutex, 0), Some((0, 0)));
        assert_eq!(split(Family::Mutex, 3), Some((1, 2)));
        assert_eq!(split(Family::Election, 1), Some((1, 0)));
        assert_eq!(split(Family::Semaphore, 3), None);
        assert_eq!(split(Family::RwLock, 3), None);
        assert_eq!(split(Family::RwLock, 1), Some((1, 0)));
        assert_eq!(split(Family::Semaphore, 0), Some((0, 0)));
    }
}
