//! The workloads, one module each, and the progress bar they share: the mutex's six, the
//! semaphore's, read-write lock's and election's, the command line's on `file://` (`cli`), and
//! the cost of a guarded write (`guarded`).

pub mod cli;
pub mod contended;
pub mod election;
pub mod guarded;
pub mod handover;
pub mod herd;
pub mod herd_reference;
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

/// Measures every contestant of `running` in the same stretch of time: `ops` steps each, `turn` at
/// a time (`step(c, n)` runs `n` of `c`'s), who goes first rotating so that no contestant always
/// follows the same one. A contestant whose step fails leaves `running` and is returned with its
/// error; the others go on.
pub async fn in_turns<C>(
    running: &mut Vec<C>,
    ops: usize,
    turn: usize,
    pb: &ProgressBar,
    mut step: impl AsyncFnMut(&mut C, usize) -> anyhow::Result<()>,
) -> Vec<(C, anyhow::Error)> {
    let mut out = Vec::new();
    let mut done = 0;
    while done < ops && !running.is_empty() {
        let n = turn.min(ops - done);
        let mut failed = Vec::new();
        for (i, c) in running.iter_mut().enumerate() {
            if let Err(e) = step(c, n).await {
                failed.push((i, e));
            }
            pb.inc(n as u64);
        }
        for (i, e) in failed.into_iter().rev() {
            out.push((running.remove(i), e));
        }
        done += n;
        if !running.is_empty() {
            running.rotate_left(1);
        }
    }
    out
}

/// A primitive's rows: one throughput row per client count of `sizes`, then one handover row,
/// under one progress bar labelled `label`.
pub async fn throughput_then_handover<T, TF, H, HF>(
    label: String,
    sizes: &crate::cli::Sizes,
    mut throughput: T,
    handover: H,
) -> anyhow::Result<Vec<crate::model::Record>>
where
    T: FnMut(usize) -> TF,
    TF: std::future::Future<Output = anyhow::Result<crate::model::Record>>,
    H: FnOnce() -> HF,
    HF: std::future::Future<Output = anyhow::Result<crate::model::Record>>,
{
    let mut rows = Vec::new();
    let pb = bar(sizes.clients.len() as u64 + 1, label);
    for &clients in &sizes.clients {
        pb.set_message(format!("{clients} clients"));
        rows.push(throughput(clients).await?);
        pb.inc(1);
    }
    pb.set_message("handover");
    rows.push(handover().await?);
    pb.finish_and_clear();
    Ok(rows)
}
