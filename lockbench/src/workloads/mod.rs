//! The workloads, one module each, and the progress bar they share: the mutex's six, and the
//! semaphore's, read-write lock's and election's.

pub mod contended;
pub mod election;
pub mod handover;
pub mod herd;
pub mod rwlock;
pub mod scale;
pub mod semaphore;
pub mod takeover;
pub mod uncontended;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar of `len` steps labelled `label` (hidden when stderr is not a terminal).
pub fn bar(len: u64, label: String) -> ProgressBar {
    let pb = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{prefix:>40} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_prefix(label);
    pb
}
