//! `cli`: the command as a shell script on one machine uses it, on `file://` (no server):
//! `locksmith run NAME -- true` against `flock(1)` (`flock FILE true`), each a new process per
//! cycle (start-up, lock, run `true`, release, exit), one after the other, uncontended. It is the
//! cost of replacing `flock(1)` in a cron job or a deploy script.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use tokio::process::Command;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::unique_name;

/// The `locksmith` binary: `LOCKSMITH_BIN`, else beside lockbench's own executable (the same
/// `cargo build --release` target directory).
fn locksmith_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("LOCKSMITH_BIN") {
        return Ok(bin.into());
    }
    let exe = std::env::current_exe().context("finding lockbench's own executable")?;
    let bin = exe.with_file_name("locksmith");
    if !bin.is_file() {
        bail!(
            "no locksmith binary at {} (build it with `cargo build --release -p locksmith-cli`, or set LOCKSMITH_BIN)",
            bin.display()
        );
    }
    Ok(bin)
}

/// The `locksmith` and `flock(1)` rows on the lock directory of `url`.
pub async fn run(url: &str, sizes: &Sizes) -> Result<Vec<Record>> {
    let bin = locksmith_bin()?;
    let dir = PathBuf::from(format!("/{}", locksmith::driver::BackendUrl::parse(url)?.path));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = unique_name("cli", "locksmith");
    let flock_file = dir.join(format!("flock-{}", name.replace('/', "_")));
    let ops = sizes.cli_ops;
    let pb = super::bar(2 * ops as u64, "file cli (locksmith run, flock(1))".into());
    let (mut ours, mut theirs) = (Samples::with_capacity(ops), Samples::with_capacity(ops));
    for _ in 0..ops {
        ours.push(time(Command::new(&bin).args(["--url", url, "run", &name, "--", "true"])).await?);
        pb.inc(1);
        theirs.push(time(Command::new("flock").arg(&flock_file).arg("true")).await?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(vec![row("locksmith", &ours), row("flock(1)", &theirs)])
}

/// The wall time of one run of `cmd`, which must succeed.
async fn time(cmd: &mut Command) -> Result<std::time::Duration> {
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await
        .with_context(|| format!("running {:?}", program(cmd)))?;
    if !out.status.success() {
        return Err(anyhow!(
            "{:?} failed ({}): {}",
            program(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(t0.elapsed())
}

fn program(cmd: &Command) -> &Path {
    Path::new(cmd.as_std().get_program())
}

fn row(system: &str, samples: &Samples) -> Record {
    let mut r = Record::new(system, "file", "cli");
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5).map(round3);
    r.p99_us = samples.quantile(0.99).map(round3);
    r
}
