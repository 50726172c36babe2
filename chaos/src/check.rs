//! The checker: what one run's events and the register's log say.
//!
//! - A **critical section** is a worker's `Enter` … `Exit` (for a killed worker: `Enter` … its
//!   kill), in its part ([`Role`]: the mutex, a permit of N, a side of a read-write lock, the
//!   leadership). A grant while the sections still open leave no room for it is an **overlap**:
//!   for an exclusive part (mutex, writer, leader) any other section open, for a reader an open
//!   writer's, for a permit of N, N other permits' — measured on the one monotonic clock.
//! - The **grant order** is the order of the `Enter` events. A **token regression** is an
//!   exclusive grant (mutex, writer, leader) whose token is below an earlier grant's, or a shared
//!   grant (a reader, a permit) whose token is below that of a section that ended before its
//!   `acquire` began. A shared holder can learn of its grant long after the server made it (its
//!   notification went through a member that was stopped), while later holders come and go:
//!   its token, taken when it queued, is then below theirs, and rightly so.
//! - A **stale write accepted** is a write the storage accepted after it had accepted a write
//!   of a *later* grant that excludes it: the old holder's write landed after the new holder's
//!   (any later grant for an exclusive part; a later writer's for a reader). For a permit of N:
//!   a write accepted while the writes of N later grants stood (written and not left). With
//!   tokens that follow the grant order, a register that checks tokens never lets that happen —
//!   this count is what fencing promises, and it must be 0. A **stale write rejected** is a
//!   write the register refused: fencing at work.
//! - For a fault with a target (the worker holding the lock when it struck): the **takeover** is
//!   the first `Enter` of another worker after the fault; the holder was **told** if its `lost()`
//!   fired (a `Lost` event) in the section the fault struck, and **not told** if another worker
//!   entered while it was still inside and it never heard.

use std::collections::HashMap;

use serde::Serialize;

use crate::events::Event;
use crate::faults::{ms, Injected};
use crate::primitive::Role;
use crate::register::Accepted;

/// What one run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Measured {
    /// Grants (`Enter` events).
    pub acquisitions: usize,
    /// Grants made while another process was still inside its critical section.
    pub overlaps: usize,
    /// The longest time a process stayed inside after another was granted the lock, in ms.
    pub overlap_ms_max: f64,
    /// Writes the register accepted after a write of a later grant (must be 0).
    pub stale_writes_accepted: usize,
    /// Writes the register rejected.
    pub stale_writes_rejected: usize,
    /// Writes in all.
    pub writes: usize,
    /// Faults whose holder's `lost()` fired.
    pub lost_signalled: usize,
    /// Faults whose holder was overtaken without ever hearing of it.
    pub lost_not_signalled: usize,
    /// Of the holders told, those told only after another holder had entered their lock: told,
    /// but not first.
    pub lost_late: usize,
    /// From each fault to its holder's `lost()`, in ms.
    pub lost_ms: Vec<f64>,
    /// From each fault to the next grant of another worker, in ms.
    pub takeover_ms: Vec<f64>,
    /// Grants whose token is below an earlier grant's.
    pub token_regressions: usize,
    /// Errors the workers reported (acquire, connect, register).
    pub errors: usize,
}

/// One critical section.
#[derive(Clone, Copy, Debug)]
struct Section {
    worker: usize,
    role: Role,
    /// When its `acquire` began, at the latest: the worker's event before its `Enter`.
    asked: u64,
    start: u64,
    end: u64,
    token: u64,
    lost_at: Option<u64>,
}

/// The critical sections in `events` (grant order); `killed[w]` ends an open section of worker
/// `w`, `roles[w]` is its part (the mutex when missing).
fn sections(events: &[(usize, Event)], killed: &[Option<u64>], roles: &[Role], run_end: u64) -> Vec<Section> {
    let mut open: HashMap<usize, Section> = HashMap::new();
    let mut last: HashMap<usize, u64> = HashMap::new();
    let mut done = Vec::new();
    for (w, e) in events {
        let asked = last.insert(*w, e.t()).unwrap_or(0);
        match e {
            Event::Enter { t, token } => {
                let section = Section {
                    worker: *w,
                    role: roles.get(*w).copied().unwrap_or(Role::Mutex),
                    asked,
                    start: *t,
                    end: u64::MAX,
                    token: *token,
                    lost_at: None,
                };
                if let Some(s) = open.insert(*w, section) {
                    done.push(s); // never exited: cannot happen, kept to be seen
                }
            }
            Event::Lost { t, .. } => {
                if let Some(s) = open.get_mut(w) {
                    s.lost_at.get_or_insert(*t);
                }
            }
            Event::Exit { t } => {
                if let Some(mut s) = open.remove(w) {
                    s.end = *t;
                    done.push(s);
                }
            }
            _ => {}
        }
    }
    for (w, mut s) in open {
        s.end = killed.get(w).copied().flatten().unwrap_or(run_end);
        done.push(s);
    }
    done.sort_by_key(|s| s.start);
    done
}

/// The worker of each run, as the checker needs it: when it was killed, its part, its id in the
/// storage's log.
#[derive(Clone, Debug)]
pub struct Who {
    /// Killed by a fault at this time.
    pub killed: Option<u64>,
    /// Its part.
    pub role: Role,
    /// Its id in the log.
    pub id: String,
}

/// The sections open when `b` was granted that leave it no room, if they are as many as its
/// part allows (an overlap); empty otherwise.
fn crowding(sections: &[Section], i: usize) -> Vec<usize> {
    let b = &sections[i];
    let open: Vec<usize> = (0..i)
        .filter(|&j| {
            let a = &sections[j];
            a.worker != b.worker && a.end > b.start && b.role.conflicts(a.role)
        })
        .collect();
    if open.len() > b.role.room() {
        open
    } else {
        Vec::new()
    }
}

/// Stale writes accepted in `log` (see the module docs); `grant` gives an entry's grant (its rank
/// in the grant order) and part, `None` for a writer the run never saw enter.
fn stale_accepted(log: &[Accepted], grant: impl Fn(&Accepted) -> Option<(usize, Role)>) -> usize {
    let mut stale = 0;
    let (mut latest_any, mut latest_exclusive) = (None::<usize>, None::<usize>);
    let mut standing: Vec<usize> = Vec::new(); // permits written and not left, by grant
    for w in log {
        let Some((r, role)) = grant(w) else { continue };
        if w.left {
            standing.retain(|&g| g != r);
            continue;
        }
        let is_stale = match role {
            Role::Read => latest_exclusive.is_some_and(|l| l > r),
            Role::Permit(n) => {
                let newer = standing.iter().filter(|&&g| g > r).count();
                !standing.contains(&r) && newer >= usize::try_from(n).unwrap_or(usize::MAX)
            }
            _ => latest_any.is_some_and(|l| l > r),
        };
        if is_stale {
            stale += 1;
            continue;
        }
        if let Role::Permit(n) = role {
            if !standing.contains(&r) {
                standing.push(r);
                standing.sort_unstable();
                let extra = standing.len().saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
                standing.drain(..extra);
            }
        }
        latest_any = latest_any.max(Some(r));
        if role.exclusive() {
            latest_exclusive = latest_exclusive.max(Some(r));
        }
    }
    stale
}

/// Measures one run.
pub fn measure(
    events: &[(usize, Event)],
    workers: &[Who],
    log: &[Accepted],
    faults: &[Injected],
    run_end: u64,
) -> Measured {
    let mut events = events.to_vec();
    events.sort_by_key(|(_, e)| e.t());
    let killed: Vec<Option<u64>> = workers.iter().map(|w| w.killed).collect();
    let roles: Vec<Role> = workers.iter().map(|w| w.role).collect();
    let sections = sections(&events, &killed, &roles, run_end);
    let mut m = Measured {
        acquisitions: sections.len(),
        ..Measured::default()
    };
    // A grant that the open sections leave no room for is one overlap; how long the earliest
    // of them to end stayed inside after it is how long the part's limit was exceeded.
    let crowds: Vec<Vec<usize>> = (0..sections.len()).map(|i| crowding(&sections, i)).collect();
    for (b, crowd) in sections.iter().zip(&crowds) {
        let Some(a) = crowd.iter().map(|&j| &sections[j]).min_by_key(|a| a.end) else {
            continue;
        };
        m.overlaps += 1;
        m.overlap_ms_max = m.overlap_ms_max.max(ms(a.end - b.start));
        // Each overlap in the log, for whoever looks into one: both sections, on the machine's
        // monotonic clock (ms), and when the earlier holder was told.
        tracing::warn!(
            earlier = format!(
                "worker {} ({:?}) token {} in {:.0}..{:.0} told {:?}",
                a.worker,
                a.role,
                a.token,
                ms(a.start),
                ms(a.end),
                a.lost_at.map(|t| ms(t).round())
            ),
            later = format!(
                "worker {} ({:?}) token {} entered {:.0}",
                b.worker,
                b.role,
                b.token,
                ms(b.start)
            ),
            crowd = crowd.len(),
            "overlap"
        );
    }
    // Tokens grow with the grants: an exclusive grant's is above every earlier grant's; a shared
    // one's (a reader, a permit) above those of every section that ended before its `acquire`
    // began. Shared grants made together may report their `Enter`s in either order, and a
    // shared holder may hear of its grant late (see the module docs): when it is told is not
    // when it was granted, but it cannot have been granted before it asked.
    for (i, s) in sections.iter().enumerate() {
        let exclusive = s.role.exclusive();
        if let Some(a) = sections[..i]
            .iter()
            .find(|a| a.token > s.token && (exclusive || a.end <= s.asked))
        {
            m.token_regressions += 1;
            tracing::warn!(
                earlier = format!(
                    "worker {} ({:?}) token {} in {:.0}..{:.0}",
                    a.worker,
                    a.role,
                    a.token,
                    ms(a.start),
                    ms(a.end)
                ),
                later = format!(
                    "worker {} ({:?}) token {} asked {:.0} in {:.0}..{:.0}",
                    s.worker,
                    s.role,
                    s.token,
                    ms(s.asked),
                    ms(s.start),
                    ms(s.end)
                ),
                "token backwards"
            );
        }
    }
    // Grant rank and part of each (writer, token): the storage's log names writers by id.
    let rank: HashMap<(&str, u64), (usize, Role)> = sections
        .iter()
        .enumerate()
        .filter_map(|(i, s)| workers.get(s.worker).map(|w| ((w.id.as_str(), s.token), (i, s.role))))
        .collect();
    m.stale_writes_accepted = stale_accepted(log, |w| rank.get(&(w.writer.as_str(), w.token)).copied());
    for (_, e) in &events {
        match e {
            Event::Write { accepted, .. } => {
                m.writes += 1;
                if !accepted {
                    m.stale_writes_rejected += 1;
                }
            }
            Event::Error { .. } => m.errors += 1,
            _ => {}
        }
    }
    for f in faults {
        let struck = sections
            .iter()
            .find(|s| s.worker == f.holder && s.start <= f.at && f.at < s.end);
        if let Some(next) = sections.iter().find(|s| s.worker != f.holder && s.start >= f.at) {
            m.takeover_ms.push(ms(next.start - f.at));
        }
        let Some(struck) = struck else { continue };
        let index = sections.iter().position(|s| std::ptr::eq(s, struck));
        // When the first section that the struck one's part left no room for began.
        let overtaken_at = index.and_then(|i| {
            (sections.iter().zip(&crowds))
                .filter(|(_, crowd)| crowd.contains(&i))
                .map(|(s, _)| s.start)
                .min()
        });
        match struck.lost_at {
            Some(t) => {
                m.lost_signalled += 1;
                m.lost_ms.push(ms(t.saturating_sub(f.at)));
                if overtaken_at.is_some_and(|o| o < t) {
                    m.lost_late += 1;
                }
            }
            None => {
                let overtaken = overtaken_at.is_some();
                let killed = killed.get(struck.worker).copied().flatten().is_some();
                if overtaken && !killed {
                    m.lost_not_signalled += 1;
                }
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter(w: usize, t: u64, token: u64) -> (usize, Event) {
        (w, Event::Enter { t, token })
    }

    fn exit(w: usize, t: u64) -> (usize, Event) {
        (w, Event::Exit { t })
    }

    fn workers(roles: &[Role]) -> Vec<Who> {
        roles
            .iter()
            .enumerate()
            .map(|(i, role)| Who {
                killed: None,
                role: *role,
                id: format!("w{i}"),
            })
            .collect()
    }

    fn wrote(token: u64, writer: &str) -> Accepted {
        Accepted::write(token, writer)
    }

    #[test]
    fn overlaps_regressions_and_stale_writes() {
        let who = workers(&[Role::Mutex, Role::Mutex]);
        // w0 holds 10..50 with token 5; w1 enters at 30 (overlap) with token 7.
        let events = vec![enter(0, 10, 5), enter(1, 30, 7), exit(0, 50), exit(1, 60)];
        // The stale holder's write, accepted late.
        let log = vec![wrote(5, "w0"), wrote(7, "w1"), wrote(5, "w0")];
        let m = measure(&events, &who, &log, &[], 100);
        assert_eq!((m.acquisitions, m.overlaps, m.token_regressions), (2, 1, 0));
        assert_eq!((m.stale_writes_accepted, m.overlap_ms_max), (1, ms(20)));
        // The next holder got a smaller token: a regression.
        let events = vec![enter(0, 10, 5), exit(0, 20), enter(1, 30, 3), exit(1, 40)];
        let m = measure(&events, &who, &[], &[], 100);
        assert_eq!((m.overlaps, m.token_regressions), (0, 1));
    }

    #[test]
    fn readers_share_and_a_writer_excludes_them() {
        let who = workers(&[Role::Read, Role::Write, Role::Read]);
        // Two readers together (fine, in either token order), then the writer while reader w2
        // is still inside (an overlap), whose write is followed by the reader's (stale).
        let events = vec![
            enter(0, 10, 2),
            enter(2, 12, 1),
            exit(0, 20),
            enter(1, 30, 3),
            exit(2, 40),
            exit(1, 50),
        ];
        let log = vec![wrote(2, "w0"), wrote(1, "w2"), wrote(3, "w1"), wrote(1, "w2")];
        let m = measure(&events, &who, &log, &[], 100);
        assert_eq!((m.overlaps, m.token_regressions, m.stale_writes_accepted), (1, 0, 1));
        // A reader after a writer that left: no overlap, nothing stale.
        let events = vec![enter(1, 10, 3), exit(1, 20), enter(0, 30, 4), exit(0, 40)];
        let log = vec![wrote(3, "w1"), wrote(4, "w0")];
        let m = measure(&events, &who, &log, &[], 100);
        assert_eq!((m.overlaps, m.stale_writes_accepted), (0, 0));
    }

    #[test]
    fn permits_allow_n_at_once_and_no_more() {
        let two = Role::Permit(2);
        let who = workers(&[two, two, two, two]);
        // w0 and w1 together (fine); w2 while both are inside: one over.
        let events = vec![
            enter(0, 10, 1),
            enter(1, 12, 2),
            enter(2, 20, 3),
            exit(0, 30),
            exit(1, 31),
            exit(2, 32),
        ];
        // w0's write after w1's and w2's stood: stale.
        let log = vec![wrote(1, "w0"), wrote(2, "w1"), wrote(3, "w2"), wrote(1, "w0")];
        let m = measure(&events, &who, &log, &[], 100);
        assert_eq!((m.overlaps, m.stale_writes_accepted), (1, 1));
        // A long holder among short ones that leave: never stale, never an overlap.
        let events = vec![
            enter(0, 10, 1),
            enter(1, 12, 2),
            exit(1, 20),
            enter(2, 21, 3),
            exit(2, 30),
            enter(3, 31, 4),
            exit(0, 40),
            exit(3, 41),
        ];
        let left = |token, writer: &str| Accepted {
            left: true,
            ..wrote(token, writer)
        };
        let log = vec![
            wrote(1, "w0"),
            wrote(2, "w1"),
            left(2, "w1"),
            wrote(3, "w2"),
            left(3, "w2"),
            wrote(4, "w3"),
            wrote(1, "w0"),
        ];
        let m = measure(&events, &who, &log, &[], 100);
        assert_eq!((m.overlaps, m.stale_writes_accepted, m.token_regressions), (0, 0, 0));
        // Two permits granted together, the larger token's holder in and out (10 ms) before the
        // other's `Enter` is printed: not a regression. Nor a holder that asked before the
        // other's section and heard of its grant 1.5 s later (its notification held up by a
        // stopped member). A smaller token for an `acquire` begun after that section ended is.
        const MS: u64 = 1_000_000;
        let ready = |w, t| (w, Event::Ready { t });
        let released = |w, t| (w, Event::Released { t, ok: true });
        let events = vec![
            ready(0, MS),
            ready(1, MS),
            enter(0, 10 * MS, 6),
            exit(0, 20 * MS),
            enter(1, 25 * MS, 5),
            exit(1, 30 * MS),
        ];
        assert_eq!(measure(&events, &who, &[], &[], 100).token_regressions, 0);
        let events = vec![
            ready(0, MS),
            ready(1, MS),
            enter(0, 10 * MS, 6),
            exit(0, 20 * MS),
            enter(1, 1500 * MS, 5),
            exit(1, 1600 * MS),
        ];
        assert_eq!(measure(&events, &who, &[], &[], 100).token_regressions, 0);
        let events = vec![
            ready(0, MS),
            ready(1, MS),
            enter(1, 2 * MS, 4),
            exit(1, 3 * MS),
            released(1, 4 * MS),
            enter(0, 10 * MS, 6),
            exit(0, 20 * MS),
            released(0, 21 * MS),
            enter(0, 24 * MS, 7),
            exit(0, 26 * MS),
            enter(1, 30 * MS, 5),
            exit(1, 40 * MS),
        ];
        assert_eq!(measure(&events, &who, &[], &[], 100).token_regressions, 0);
        let events = vec![
            ready(0, MS),
            ready(1, MS),
            enter(0, 10 * MS, 6),
            exit(0, 20 * MS),
            (
                1,
                Event::Error {
                    t: 21 * MS,
                    what: "acquire".into(),
                    error: "x".into(),
                },
            ),
            enter(1, 30 * MS, 5),
            exit(1, 40 * MS),
        ];
        assert_eq!(measure(&events, &who, &[], &[], 100).token_regressions, 1);
    }

    #[test]
    fn a_struck_holder_told_or_not() {
        let who = workers(&[Role::Mutex, Role::Mutex]);
        let fault = Injected {
            fault: "pause",
            detail: String::new(),
            at: 20,
            healed: 40,
            holder: 0,
        };
        let told = vec![
            enter(0, 10, 1),
            enter(1, 30, 2),
            (
                0,
                Event::Lost {
                    t: 45,
                    reason: "x".into(),
                },
            ),
            exit(0, 46),
            exit(1, 50),
        ];
        let m = measure(&told, &who, &[], std::slice::from_ref(&fault), 100);
        assert_eq!((m.lost_signalled, m.lost_not_signalled), (1, 0));
        // Told at 45, after worker 1 entered at 30: told, but not first.
        assert_eq!(m.lost_late, 1);
        let first = vec![
            enter(0, 10, 1),
            (
                0,
                Event::Lost {
                    t: 25,
                    reason: "x".into(),
                },
            ),
            exit(0, 26),
            enter(1, 30, 2),
            exit(1, 50),
        ];
        let m = measure(&first, &who, &[], std::slice::from_ref(&fault), 100);
        assert_eq!((m.lost_signalled, m.lost_late, m.lost_not_signalled), (1, 0, 0));
        assert_eq!(m.takeover_ms.len(), 1);
        let untold = vec![enter(0, 10, 1), enter(1, 30, 2), exit(0, 46), exit(1, 50)];
        let m = measure(&untold, &who, &[], &[fault], 100);
        assert_eq!((m.lost_signalled, m.lost_not_signalled), (0, 1));
    }
}
