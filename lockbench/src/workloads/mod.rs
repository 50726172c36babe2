//! The six workloads, one module each, and the progress bar they share.

pub mod contended;
pub mod handover;
pub mod herd;
pub mod scale;
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
