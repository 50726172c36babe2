//! The drop-armed clean-up guard every backend's cancel safety rests on: what an `acquire` put,
//! or may have put, on the server (a queue entry, a key, a node) is removed in the background
//! when the call's future is dropped before it hands the lease back, unless the call disarmed it.
//!
//! A backend describes what is left and how to remove it by implementing [`CleanUp`] for the
//! state it keeps, and wraps that state in an [`Armed`]: the guard's `Drop` hands the clean-up to
//! [`crate::driver::cleanup::spawn`] (so the dropped call, and `Locker::shutdown`, wait for it),
//! and where no runtime takes it, calls [`CleanUp::unspawned`] (a synchronous removal, or a
//! warning that what is left expires).

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;

use crate::driver::cleanup;

/// A clean-up's work, run in a task of [`cleanup::spawn`].
pub type CleanupTask = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What a guard leaves to clean up, and how.
pub trait CleanUp {
    /// The removal of what is left, to run in the background; `None` when nothing is left (what
    /// was to be created certainly was not). Called once, from the armed guard's `Drop`, so it
    /// may start a request right there (sent before the guard is gone) and move state out.
    fn task(&mut self) -> Option<CleanupTask>;

    /// Called when no runtime took [`CleanUp::task`]'s task (it was dropped unrun): remove what
    /// is left here, synchronously, or say that it expires. Does nothing by default.
    fn unspawned(&mut self) {}
}

/// Guards `state`: dropped while armed, it runs `state`'s [`CleanUp`] in the background.
/// It derefs to the state, which the call keeps using while it is in flight.
///
/// # Cancel safety
///
/// This is the piece that makes an `acquire` cancel-safe: whatever await point its future is
/// dropped at, an armed guard's drop spawns the clean-up. Disarm it only once the lease is the
/// caller's (or nothing was created).
///
/// # Examples
///
/// ```
/// use locksmith_core::driver::armed::{Armed, CleanUp, CleanupTask};
/// use tokio::sync::mpsc;
///
/// /// A queue entry this call added (here: a message saying it was removed).
/// struct Entry {
///     id: String,
///     removed: mpsc::UnboundedSender<String>,
/// }
///
/// impl CleanUp for Entry {
///     fn task(&mut self) -> Option<CleanupTask> {
///         let (id, removed) = (self.id.clone(), self.removed.clone());
///         Some(Box::pin(async move {
///             let _ = removed.send(id);
///         }))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (removed, mut seen) = mpsc::unbounded_channel();
/// // Dropped armed (a cancelled acquire): the entry is removed in the background.
/// drop(Armed::new(Entry { id: "a".into(), removed: removed.clone() }));
/// assert_eq!(seen.recv().await.as_deref(), Some("a"));
///
/// // Disarmed (the lease is the caller's): nothing runs.
/// let mut granted = Armed::new(Entry { id: "b".into(), removed });
/// granted.disarm();
/// assert_eq!(granted.id, "b");
/// drop(granted);
/// assert!(seen.recv().await.is_none());
/// # }
/// ```
pub struct Armed<C: CleanUp> {
    /// `None` only once [`Armed::into_inner`] took it.
    state: Option<C>,
    armed: bool,
}

impl<C: CleanUp> Armed<C> {
    /// Armed over `state`: dropping it cleans up.
    pub fn new(state: C) -> Self {
        Armed {
            state: Some(state),
            armed: true,
        }
    }

    /// Disarmed over `state` until [`Armed::arm`] (nothing exists on the server yet).
    pub fn disarmed(state: C) -> Self {
        Armed {
            state: Some(state),
            armed: false,
        }
    }

    /// Something to clean up may exist from here on.
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// Nothing to clean up (the caller owns it now, or it is gone): dropping does nothing.
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// Whether dropping the guard now cleans up.
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// Disarms the guard and hands its state back.
    pub fn into_inner(mut self) -> C {
        self.armed = false;
        self.state.take().expect("the state is there until into_inner")
    }
}

impl<C: CleanUp> Deref for Armed<C> {
    type Target = C;

    fn deref(&self) -> &C {
        self.state.as_ref().expect("the state is there until into_inner")
    }
}

impl<C: CleanUp> DerefMut for Armed<C> {
    fn deref_mut(&mut self) -> &mut C {
        self.state.as_mut().expect("the state is there until into_inner")
    }
}

impl<C: CleanUp> Drop for Armed<C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(state) = self.state.as_mut() else { return };
        if let Some(task) = state.task() {
            if !cleanup::spawn(task) {
                state.unspawned();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Counts the tasks made, run and the fallbacks taken.
    #[derive(Clone, Default)]
    struct Counts {
        made: Arc<AtomicUsize>,
        ran: Arc<AtomicUsize>,
        unspawned: Arc<AtomicUsize>,
    }

    struct Left {
        counts: Counts,
        nothing: bool,
    }

    impl CleanUp for Left {
        fn task(&mut self) -> Option<CleanupTask> {
            if self.nothing {
                return None;
            }
            self.counts.made.fetch_add(1, Ordering::SeqCst);
            let ran = self.counts.ran.clone();
            Some(Box::pin(async move {
                ran.fetch_add(1, Ordering::SeqCst);
            }))
        }

        fn unspawned(&mut self) {
            self.counts.unspawned.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn left(counts: &Counts) -> Left {
        Left {
            counts: counts.clone(),
            nothing: false,
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn dropped_armed_it_spawns_the_clean_up_once() {
        let counts = Counts::default();
        drop(Armed::new(left(&counts)));
        settle().await;
        assert_eq!(counts.made.load(Ordering::SeqCst), 1);
        assert_eq!(counts.ran.load(Ordering::SeqCst), 1);
        assert_eq!(counts.unspawned.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn disarmed_it_cleans_up_nothing() {
        let counts = Counts::default();
        let mut guard = Armed::new(left(&counts));
        guard.disarm();
        assert!(!guard.is_armed());
        drop(guard);
        drop(Armed::disarmed(left(&counts)));
        let kept = Armed::new(left(&counts)).into_inner();
        drop(kept);
        settle().await;
        assert_eq!(counts.made.load(Ordering::SeqCst), 0);
        assert_eq!(counts.ran.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn armed_later_it_cleans_up_and_nothing_left_spawns_nothing() {
        let counts = Counts::default();
        let mut guard = Armed::disarmed(left(&counts));
        guard.arm();
        drop(guard);
        let mut nothing = Armed::new(left(&counts));
        nothing.nothing = true;
        drop(nothing);
        settle().await;
        assert_eq!(counts.made.load(Ordering::SeqCst), 1);
        assert_eq!(counts.ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn without_a_runtime_it_falls_back() {
        let counts = Counts::default();
        drop(Armed::new(left(&counts)));
        assert_eq!(counts.made.load(Ordering::SeqCst), 1);
        assert_eq!(counts.ran.load(Ordering::SeqCst), 0);
        assert_eq!(counts.unspawned.load(Ordering::SeqCst), 1);
    }
}
