//! The checker: what one run's events and the register's log say.
//!
//! - A **critical section** is a worker's `Enter` … `Exit` (for a killed worker: `Enter` … its
//!   kill). A grant while another process is still inside its section is an **overlap**: two
//!   processes inside at once, measured on the one monotonic clock.
//! - The **grant order** is the order of the `Enter` events. A **token regression** is a grant
//!   whose token is below an earlier grant's.
//! - A **stale write accepted** is a write the register accepted after it had accepted a write
//!   of a *later* grant: the old holder's write landed after the new holder's. With tokens that
//!   follow the grant order, a register that checks tokens never lets that happen — this count is
//!   what fencing promises, and it must be 0. A **stale write rejected** is a write the register
//!   refused (its token was below one it had accepted): fencing at work.
//! - For a fault with a target (the worker holding the lock when it struck): the **takeover** is
//!   the first `Enter` of another worker after the fault; the holder was **told** if its `lost()`
//!   fired (a `Lost` event) in the section the fault struck, and **not told** if another worker
//!   entered while it was still inside and it never heard.

use std::collections::HashMap;

use serde::Serialize;

use crate::events::Event;
use crate::faults::{ms, Injected};
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
    start: u64,
    end: u64,
    token: u64,
    lost_at: Option<u64>,
}

/// The critical sections in `events` (grant order); `killed[w]` ends an open section of worker `w`.
fn sections(events: &[(usize, Event)], killed: &[Option<u64>], run_end: u64) -> Vec<Section> {
    let mut open: HashMap<usize, Section> = HashMap::new();
    let mut done = Vec::new();
    for (w, e) in events {
        match e {
            Event::Enter { t, token } => {
                let section = Section {
                    worker: *w,
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

/// Measures one run.
pub fn measure(
    events: &[(usize, Event)],
    killed: &[Option<u64>],
    log: &[Accepted],
    ids: &[String],
    faults: &[Injected],
    run_end: u64,
) -> Measured {
    let mut events = events.to_vec();
    events.sort_by_key(|(_, e)| e.t());
    let sections = sections(&events, killed, run_end);
    let mut m = Measured {
        acquisitions: sections.len(),
        ..Measured::default()
    };
    // A grant while another process is still inside is one overlap; how long the earlier one
    // stayed inside after the first such grant is how long two were inside at once.
    for (i, b) in sections.iter().enumerate() {
        if let Some(a) = sections[..i].iter().find(|a| a.worker != b.worker && a.end > b.start) {
            m.overlaps += 1;
            // Each overlap in the log, for whoever looks into one: both sections, on the
            // machine's monotonic clock (ms), and when the earlier holder was told.
            tracing::warn!(
                earlier = format!(
                    "worker {} token {} in {:.0}..{:.0} told {:?}",
                    a.worker,
                    a.token,
                    ms(a.start),
                    ms(a.end),
                    a.lost_at.map(|t| ms(t).round())
                ),
                later = format!("worker {} token {} entered {:.0}", b.worker, b.token, ms(b.start)),
                "overlap"
            );
        }
    }
    for (i, a) in sections.iter().enumerate() {
        if let Some(b) = sections[i + 1..]
            .iter()
            .find(|b| b.worker != a.worker && b.start < a.end)
        {
            m.overlap_ms_max = m.overlap_ms_max.max(ms(a.end - b.start));
        }
    }
    let mut highest = 0;
    for s in &sections {
        if s.token < highest {
            m.token_regressions += 1;
        }
        highest = highest.max(s.token);
    }
    // Grant rank of each (writer, token): the register's log names writers by id.
    let rank: HashMap<(&str, u64), usize> = sections
        .iter()
        .enumerate()
        .filter_map(|(i, s)| ids.get(s.worker).map(|id| ((id.as_str(), s.token), i)))
        .collect();
    let mut latest = None;
    for w in log {
        let Some(&r) = rank.get(&(w.writer.as_str(), w.token)) else {
            continue;
        };
        match latest {
            Some(l) if r < l => m.stale_writes_accepted += 1,
            _ => latest = Some(r),
        }
    }
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
        match struck.lost_at {
            Some(t) => {
                m.lost_signalled += 1;
                m.lost_ms.push(ms(t.saturating_sub(f.at)));
            }
            None => {
                let overtaken = sections
                    .iter()
                    .any(|s| s.worker != struck.worker && s.start > struck.start && s.start < struck.end);
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

    #[test]
    fn overlaps_regressions_and_stale_writes() {
        let ids = vec!["w0".to_owned(), "w1".to_owned()];
        // w0 holds 10..50 with token 5; w1 enters at 30 (overlap) with token 7.
        let events = vec![enter(0, 10, 5), enter(1, 30, 7), exit(0, 50), exit(1, 60)];
        let log = vec![
            Accepted {
                token: 5,
                writer: "w0".into(),
            },
            Accepted {
                token: 7,
                writer: "w1".into(),
            },
            Accepted {
                token: 5,
                writer: "w0".into(),
            }, // the stale holder, accepted late
        ];
        let m = measure(&events, &[None, None], &log, &ids, &[], 100);
        assert_eq!((m.acquisitions, m.overlaps, m.token_regressions), (2, 1, 0));
        assert_eq!(m.stale_writes_accepted, 1);
        // The next holder got a smaller token: a regression.
        let events = vec![enter(0, 10, 5), exit(0, 20), enter(1, 30, 3), exit(1, 40)];
        let m = measure(&events, &[None, None], &[], &ids, &[], 100);
        assert_eq!((m.overlaps, m.token_regressions), (0, 1));
    }

    #[test]
    fn a_struck_holder_told_or_not() {
        let ids = vec!["w0".to_owned(), "w1".to_owned()];
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
        let m = measure(&told, &[None, None], &[], &ids, std::slice::from_ref(&fault), 100);
        assert_eq!((m.lost_signalled, m.lost_not_signalled), (1, 0));
        assert_eq!(m.takeover_ms.len(), 1);
        let untold = vec![enter(0, 10, 1), enter(1, 30, 2), exit(0, 46), exit(1, 50)];
        let m = measure(&untold, &[None, None], &[], &ids, &[fault], 100);
        assert_eq!((m.lost_signalled, m.lost_not_signalled), (0, 1));
    }
}
