//! The newest state of each lock this process stepped on, kept in memory (one per lock and
//! directory, shared by the process's lockers): a step, or a waiter's look, that finds the state
//! file's newest frame still the one kept takes that state without reading the whole file,
//! checking its checksums or parsing its JSON (the hand-over's cold read of both frames, see
//! docs/overhead.md's eighteenth pass).
//!
//! A state is kept only from a frame this process read whole and found whole under the lock
//! file's `flock` (a step's read), or wrote itself in a step that succeeded (its write, and its
//! reservation's sync if it had one, done). It is taken again only if the file is the same file
//! (device and inode), of the same size, read in the same boot, and the headers of its two frame
//! slots say the newest frame is the kept one: the same slot, sequence number, checksum and
//! length. A frame is written in a slot only with a sequence number above every whole frame's,
//! under the `flock`, so a newer state (written by any process) has a newer header; a state
//! that outgrew its slots is written past the end of the file, which changes its size; a file
//! replaced by a new one is another inode, or (an inode number reused) a file whose frames'
//! numbers restart at 1, told apart by the checksum and length of the frame too. A write cut short
//! leaves a header that may not be whole: it is a header this process did not keep, and the file
//! is read whole. The reservation of tokens is only ever written with a frame (and withdrawn by
//! the step that wrote it, which then fails and keeps nothing), so the kept layout's reservation
//! is the file's.
//!
//! A step keeps the state it writes just before its write, as pending (a waiter of this process
//! woken by the write, while the writing thread has not run again yet, finds it). A pending state
//! is taken only by a look (no step runs meanwhile: the writer holds the `flock`), and only once
//! its whole frame is in the file with its checksum right (read and checked as a read of the
//! whole file would check it: what every process then reads); the step marks it written once its
//! write is done, or forgets it if the write failed, before it unlocks. A step that reserves
//! tokens and syncs the reservation keeps its state only once synced: no look of this process
//! may hand out a token whose reservation is not on disk yet.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use locksmith_core::driver::fast_hash::FastBuildHasher;

use super::record::{self, Layout};
use crate::protocol::state::{State, Text};
use crate::wake::live_or_new;

/// How many locks' states a directory's cache keeps: past it, it starts again empty (a process
/// stepping on more locks than this reads their files as before).
const KEEP: usize = 256;

/// The kept states of one lock directory in this process.
#[derive(Debug, Default)]
pub(crate) struct StateCache {
    by_stem: Mutex<HashMap<String, Arc<Kept>, FastBuildHasher>>,
}

/// One lock's kept state, and what tells whether its file still holds it.
#[derive(Debug)]
pub(crate) struct Kept {
    /// The state file's device, inode and size.
    dev: u64,
    ino: u64,
    size: u64,
    /// The boot id of the process that kept it (a state read in another boot has its last token
    /// raised to the reservation, see `txn.rs`).
    boot: Text,
    /// The state (its last token as `open_state` gives it), and its JSON.
    pub state: State,
    pub payload: Vec<u8>,
    /// Where its frame and the reservation are; `layout.mark` is the reservation's mark.
    pub layout: Layout,
    /// Kept by a step before its write, which has not said yet that it is done.
    pending: AtomicBool,
}

impl Kept {
    /// The step that kept it pending wrote it.
    pub fn written(&self) {
        self.pending.store(false, Ordering::Release);
    }
}

impl StateCache {
    /// The cache of directory `dir` (canonical) in this process.
    pub fn for_dir(dir: &Path) -> Arc<StateCache> {
        static CACHES: OnceLock<Mutex<HashMap<PathBuf, Weak<StateCache>>>> = OnceLock::new();
        live_or_new(CACHES.get_or_init(Default::default), dir, StateCache::default)
    }

    /// The kept state of lock `stem` if `file` (whose metadata is `meta`) still holds it as its
    /// newest frame, in boot `boot`; a pending one only for a look (not a `step`), once whole in
    /// the file. A read that fails is a miss (the caller reads the file whole, and meets the error
    /// there).
    pub fn get(&self, stem: &str, file: &File, meta: &Metadata, boot: &str, step: bool) -> Option<Arc<Kept>> {
        let kept = self
            .by_stem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(stem)
            .cloned()?;
        if (kept.dev, kept.ino, kept.size) != (meta.dev(), meta.ino(), meta.len()) || *kept.boot != *boot {
            return None;
        }
        let pending = kept.pending.load(Ordering::Acquire);
        if pending && step {
            return None;
        }
        record::holds(file, &kept.layout, pending)
            .unwrap_or(false)
            .then_some(kept)
    }

    /// Keeps `state` (with its JSON `payload`) of lock `stem`, the newest frame of the file
    /// `meta` describes (its size once the frame was written: `size`) at `layout`; `pending` if
    /// its step has not written it yet (see [`Kept::written`]).
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &self,
        stem: &str,
        meta: &Metadata,
        size: u64,
        boot: &Text,
        state: State,
        payload: Vec<u8>,
        layout: Layout,
        pending: bool,
    ) -> Arc<Kept> {
        let kept = Arc::new(Kept {
            pending: AtomicBool::new(pending),
            dev: meta.dev(),
            ino: meta.ino(),
            size,
            boot: boot.clone(),
            state,
            payload,
            layout,
        });
        let mut by_stem = self.by_stem.lock().unwrap_or_else(|e| e.into_inner());
        // The lock's entry replaced in place: no new key for a lock kept already.
        if let Some(old) = by_stem.get_mut(stem) {
            *old = kept.clone();
            return kept;
        }
        if by_stem.len() >= KEEP {
            by_stem.clear();
        }
        by_stem.insert(stem.to_owned(), kept.clone());
        kept
    }

    /// Forgets the kept state of lock `stem` (a step that failed to write it: what is on disk is
    /// not known).
    pub fn forget(&self, stem: &str) {
        self.by_stem.lock().unwrap_or_else(|e| e.into_inner()).remove(stem);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;

    fn temp_file(bytes: &[u8]) -> File {
        let path = std::env::temp_dir().join(format!("locksmith-cache-{:016x}", rand::random::<u64>()));
        std::fs::write(&path, bytes).unwrap();
        let f = File::options().read(true).write(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    fn layout_of(f: &File) -> Layout {
        let mut bytes = vec![0; f.metadata().unwrap().len() as usize];
        f.read_exact_at(&mut bytes, 0).unwrap();
        record::decode(&bytes).unwrap().1
    }

    /// A kept state is taken while its frame is the newest, and never once another frame was
    /// written (by anyone: here straight to the file, as another process would), nor in another
    /// boot; a pending one only by a look, and only once its frame is whole in the file.
    #[test]
    fn a_kept_state_is_taken_only_while_its_frame_is_the_newest() {
        let cache = StateCache::default();
        let f = temp_file(&record::encode_new(b"{}", 10));
        let first = layout_of(&f);
        let ours = record::write(&f, &first, b"ours", None).unwrap();
        let meta = f.metadata().unwrap();
        cache.put(
            "s",
            &meta,
            meta.len(),
            &"b".into(),
            State::default(),
            b"ours".to_vec(),
            ours,
            false,
        );
        assert!(cache.get("s", &f, &meta, "b", true).is_some());
        assert!(cache.get("s", &f, &meta, "another boot", true).is_none());
        // Another process's write, of the same length, in the other slot.
        record::write(&f, &ours, b"them", None).unwrap();
        let meta = f.metadata().unwrap();
        assert!(cache.get("s", &f, &meta, "b", false).is_none());
        // Kept pending before a write that has not landed: a look does not take it yet, a step
        // never does; once the frame is whole, a look does.
        let now = layout_of(&f);
        let next = record::prepare(&now, b"next", None);
        let size = meta.len().max(next.layout.frame_end());
        let kept = cache.put(
            "s",
            &meta,
            size,
            &"b".into(),
            State::default(),
            b"next".to_vec(),
            next.layout,
            true,
        );
        assert!(cache.get("s", &f, &meta, "b", false).is_none());
        // Only the frame's header landed (a write cut short): not whole.
        let elsewhere = temp_file(&[0; 20_000]);
        record::write_prepared(&elsewhere, &next, || Ok(())).unwrap();
        let mut header = vec![0u8; 32];
        elsewhere.read_exact_at(&mut header, next.layout.frame_at).unwrap();
        f.write_all_at(&header, next.layout.frame_at).unwrap();
        assert!(
            cache.get("s", &f, &meta, "b", false).is_none(),
            "a torn frame was taken"
        );
        record::write_prepared(&f, &next, || Ok(())).unwrap();
        assert!(
            cache.get("s", &f, &meta, "b", true).is_none(),
            "a step took a pending state"
        );
        assert!(cache.get("s", &f, &meta, "b", false).is_some());
        kept.written();
        assert!(cache.get("s", &f, &meta, "b", true).is_some());
        cache.forget("s");
        assert!(cache.get("s", &f, &meta, "b", false).is_none());
    }
}
