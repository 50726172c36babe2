//! The clean-up edge of the file backend: an entry that an `acquire` or `try_acquire` put in a
//! queue, or may have put there, is taken out when the call ends without returning it as a lease
//! (a timeout, an error, the future dropped).
//!
//! Every step runs in a blocking thread that the caller cannot stop (a `flock` wait cannot be
//! cancelled), so a dropped call may still have a step in flight that joins the queue or even
//! grants it the lock. The clean-up therefore waits for that step to end and only then removes
//! the entry: a call given up on never acquires later behind its caller's back, the classic bug of
//! a blocking `flock` moved to a thread.
//!
//! A release needs no guard: its one step runs to its end in its thread whether or not anyone
//! still awaits it. A lease whose guard stopped renewing it (abandoned) is removed by [`reap`]
//! once a heartbeat finds it (see `Dir::beat`).

use std::sync::Arc;

use tokio::sync::oneshot;

use locksmith_core::driver::armed::{Armed, CleanUp, CleanupTask};
use locksmith_core::driver::cleanup;
use locksmith_core::Result;

use crate::conn::Dir;
use crate::error::{join_error, may_pass};
use crate::layout::LockFile;
use crate::protocol::queue;
use crate::protocol::state::{Now, State};

/// An entry of this call's in a queue: removed when dropped, unless [`Pending::keep`] says the
/// caller now owns it (as a lease) or it was never added.
pub(crate) struct Pending(Armed<Entry>);

/// What a [`Pending`] removes: entry `id` of `file`'s queue, once the step in flight ended.
struct Entry {
    dir: Arc<Dir>,
    file: LockFile,
    id: String,
    /// Ends (its sender is dropped) when the step in flight ended.
    in_flight: Option<oneshot::Receiver<()>>,
}

impl Pending {
    /// The entry `id` of `file`'s queue.
    pub fn new(dir: &Arc<Dir>, file: &LockFile, id: &str) -> Pending {
        Pending(Armed::new(Entry {
            dir: dir.clone(),
            file: file.clone(),
            id: id.to_owned(),
            in_flight: None,
        }))
    }

    /// Runs `step` in a transaction on the lock's state: here if the lock file is free
    /// ([`Dir::transact_if_free`]: it runs to its end within one poll), else in a blocking
    /// thread.
    pub async fn run<R, F>(&mut self, step: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut State, Now) -> Result<R> + Send + 'static,
    {
        match self.0.dir.transact_if_free(&self.0.file, step)? {
            Ok(out) => Ok(out),
            Err(step) => self.blocking(move |dir, file| dir.transact(file, step)).await,
        }
    }

    /// [`Pending::run`] for a `try` ([`Dir::try_transact`]): `None` if the lock file stayed
    /// locked by another process, and `step` did not run.
    pub async fn try_run<R, F>(&mut self, step: F) -> Result<Option<R>>
    where
        R: Send + 'static,
        F: FnOnce(&mut State, Now) -> Result<R> + Send + 'static,
    {
        match self.0.dir.transact_if_free(&self.0.file, step)? {
            Ok(out) => Ok(Some(out)),
            Err(step) => self.blocking(move |dir, file| dir.try_transact(file, step)).await,
        }
    }

    /// Runs `work` on the lock's directory and file in a blocking thread, marked in flight until
    /// it ends (a clean-up waits for it).
    async fn blocking<T, W>(&mut self, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Dir, &LockFile) -> Result<T> + Send + 'static,
    {
        let (done, in_flight) = oneshot::channel::<()>();
        self.0.in_flight = Some(in_flight);
        let (dir, file) = (self.0.dir.clone(), self.0.file.clone());
        let out = tokio::task::spawn_blocking(move || {
            let _done = done;
            work(&dir, &file)
        })
        .await
        .map_err(join_error)?;
        self.0.in_flight = None;
        out
    }

    /// The entry is the caller's now (or was never added): nothing to clean up.
    pub fn keep(mut self) {
        self.0.disarm();
    }
}

impl CleanUp for Entry {
    fn task(&mut self) -> Option<CleanupTask> {
        let (dir, file, id, in_flight) = (
            self.dir.clone(),
            self.file.clone(),
            self.id.clone(),
            self.in_flight.take(),
        );
        let leave = {
            let (dir, file, id) = (dir.clone(), file.clone(), id.clone());
            move || dir.transact(&file, |state, _| Ok(queue::leave(state, &id)))
        };
        Some(Box::pin(async move {
            if let Some(step) = in_flight {
                let _ = step.await;
            }
            match tokio::task::spawn_blocking(leave).await.map_err(join_error) {
                Ok(Ok(_)) => {}
                // Forgotten, the entry would live on under this locker's heartbeats (it beats for
                // its other leases) and hold its place in line for nobody: the next heartbeat
                // removes it, as an abandoned lease.
                Ok(Err(e)) | Err(e) => {
                    tracing::warn!(lock = %file.segment, error = %e,
                        "file backend: could not remove a queue entry; trying again at the next heartbeat");
                    dir.remove_later(&id, &file);
                }
            }
        }))
    }

    fn unspawned(&mut self) {
        // No runtime (the process is ending): remove it here, which blocks briefly.
        let _ = self
            .dir
            .transact(&self.file, |state, _| Ok(queue::leave(state, &self.id)));
    }
}

/// Removes the entries of abandoned leases (`Dir::beat` found them) in the background.
pub(crate) fn reap(dir: &Arc<Dir>, abandoned: Vec<(String, LockFile)>) {
    if abandoned.is_empty() {
        return;
    }
    let dir = dir.clone();
    cleanup::spawn(async move {
        let reaped = tokio::task::spawn_blocking(move || reap_now(&dir, abandoned));
        if let Err(e) = reaped.await {
            tracing::warn!(error = %e, "file backend: removing abandoned leases failed; they go when this locker does");
        }
    });
}

/// [`reap`], here and now (in a blocking thread).
pub(crate) fn reap_now(dir: &Dir, abandoned: Vec<(String, LockFile)>) {
    for (id, file) in abandoned {
        tracing::debug!(lock = %file.segment, "file backend: removing a lease its guard stopped renewing");
        match dir.transact(&file, |state, _| Ok(queue::leave(state, &id))) {
            Ok(_) => {}
            // A write that failed (no space, no right for now): tried again, as a release would be.
            Err(e) if may_pass(&e) => {
                tracing::warn!(lock = %file.segment, error = %e,
                    "file backend: could not remove an abandoned lease; trying again at the next heartbeat");
                dir.remove_later(&id, &file);
            }
            Err(e) => {
                tracing::warn!(lock = %file.segment, error = %e, "file backend: could not remove an abandoned lease")
            }
        }
    }
}
