//! Where a locker's wake-ups are delivered: its waiters by entry id, the observers of a lock by
//! its segment. The wait task (`wake.rs`) feeds it; the steps' connection (`conn/`) owns it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where the wait connection's wake-ups go: the waiters of this locker by entry id, the
/// observers by lock segment.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    entries: Mutex<HashMap<u64, Arc<Mailbox>>>,
    segments: Mutex<HashMap<String, Arc<Notify>>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// When the wait connection's statement in flight should have been answered by (`None`:
    /// the connection is down): what tells a waiter at its deadline that the server went away
    /// rather than that the lock stayed busy.
    answer_due: Mutex<Option<Instant>>,
}

/// How late an answer on the wait connection may come before the server counts as silent.
const ANSWER_SLACK: Duration = Duration::from_millis(500);

/// A grant the mailbox brought a waiter: the step that wrote its row made its entry hold
/// (`sql/proc_release.sql`, `protocol/queue.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Its fencing token.
    pub token: u64,
    /// Until when its lease lasts at least, on this process's clock: when the mailbox read that
    /// saw it was sent, plus the time its lease had left on the server's clock then.
    pub until: Instant,
}

/// What the hub keeps for a waiter.
#[derive(Debug, Default)]
struct Mailbox {
    /// Notified when the waiter's turn may have come.
    woken: Notify,
    /// The last grant delivered for it.
    grant: Mutex<Option<Grant>>,
}

/// A waiter's registration in the hub: removed when dropped.
pub(crate) struct Waiting<'a> {
    hub: &'a Hub,
    id: u64,
    mailbox: Arc<Mailbox>,
}

impl Waiting<'_> {
    /// Notified when the waiter's turn may have come.
    pub fn woken(&self) -> &Notify {
        &self.mailbox.woken
    }

    /// The grant delivered since the last call, if any.
    pub fn take_grant(&self) -> Option<Grant> {
        self.mailbox.grant.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.hub
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Hub {
    /// Registers the waiter of entry `id`.
    pub fn entry(&self, id: u64) -> Waiting<'_> {
        let mailbox = Arc::new(Mailbox::default());
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, mailbox.clone());
        Waiting { hub: self, id, mailbox }
    }

    /// The notification of the observers of `segment`.
    pub fn segment(&self, segment: &str) -> Arc<Notify> {
        let mut segments = self.segments.lock().unwrap_or_else(|e| e.into_inner());
        segments.entry(segment.to_owned()).or_default().clone()
    }

    /// Delivers a mailbox row: to the waiter of `entry` (with its `grant`, if it holds now), or,
    /// for a row without an entry, to the observers of `segment`.
    pub fn deliver(&self, entry: Option<u64>, segment: &str, grant: Option<Grant>) {
        if let Some(id) = entry {
            if let Some(mailbox) = self.entries.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
                if grant.is_some() {
                    *mailbox.grant.lock().unwrap_or_else(|e| e.into_inner()) = grant;
                }
                mailbox.woken.notify_one();
            }
        }
        if let Some(n) = self.segments.lock().unwrap_or_else(|e| e.into_inner()).get(segment) {
            n.notify_waiters();
            n.notify_one();
        }
    }

    /// The entries of the waiters waiting now: the only ones the heartbeat extends, so that an
    /// entry nobody waits for any more (a clean-up that could not remove it) expires.
    pub fn waiting_ids(&self) -> Vec<u64> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect()
    }

    /// Every waiter and observer: after the wait connection was lost, when wakes may have been
    /// missed.
    pub fn everyone(&self) {
        for mailbox in self.entries.lock().unwrap_or_else(|e| e.into_inner()).values() {
            mailbox.woken.notify_one();
        }
        for n in self.segments.lock().unwrap_or_else(|e| e.into_inner()).values() {
            n.notify_waiters();
            n.notify_one();
        }
    }

    /// Whether the wait connection is up and its server answers in time.
    pub fn healthy(&self) -> bool {
        let due = *self.answer_due.lock().unwrap_or_else(|e| e.into_inner());
        due.is_some_and(|due| Instant::now() <= due)
    }

    pub fn expect_answer(&self, within: Duration) {
        *self.answer_due.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + within + ANSWER_SLACK);
    }

    pub fn down(&self) {
        *self.answer_due.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // Waiters check again: their steps fail while the server is away, which they report.
        self.everyone();
    }

    /// Keeps the wait task's handle, for [`Hub::stop`].
    pub fn set_task(&self, task: JoinHandle<()>) {
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Ends the wait task.
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}
