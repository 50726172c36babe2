//! `cli`: the command as a shell script on one machine uses it, on `file://` (no server):
//! `locksmith run NAME -- true` against `flock(1)` (`flock FILE true`), each a new process per
//! cycle (start-up, lock, run `true`, release, exit), one after the other, uncontended. It is the
//! cost of replacing `flock(1)` in a cron job or a deploy script.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::unique_name;

/// The `locksmith` binary: `LOCKSMITH_BIN`; else the one the `dist` profile built in the same
/// target directory as lockbench (the command as shipped, what `scripts/bench` builds); else the
/// one beside lockbench's own executable (`cargo build --release -p locksmith-cli`). The row says
/// which ran (`bin=`): a `dist` build older than the code is measured all the same.
fn locksmith_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("LOCKSMITH_BIN") {
        return Ok(bin.into());
    }
    let exe = std::env::current_exe().context("finding lockbench's own executable")?;
    let beside = exe.with_file_name("locksmith");
    let dist = exe
        .parent()
        .and_then(Path::parent)
        .map(|target| target.join("dist").join("locksmith"));
    match dist.into_iter().chain([beside.clone()]).find(|bin| bin.is_file()) {
        Some(bin) => Ok(bin),
        None => bail!(
            "no locksmith binary at {} (build it with `cargo build --profile dist -p locksmith-cli`, on its own, or set LOCKSMITH_BIN)",
            beside.display()
        ),
    }
}

/// The `locksmith` and `flock(1)` rows on the lock directory of `url`.
pub async fn run(url: &str, sizes: &Sizes) -> Result<Vec<Record>> {
    let built = locksmith_bin()?;
    let installed = Installed::copy(&built)?;
    let dir = PathBuf::from(format!("/{}", locksmith::driver::BackendUrl::parse(url)?.path));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = unique_name("cli", "locksmith");
    let flock_file = dir.join(format!("flock-{}", name.replace('/', "_")));
    let ops = sizes.cli_ops;
    let pb = super::bar(2 * ops as u64, "file cli (locksmith run, flock(1))".into());
    let (mut ours, mut theirs) = (Samples::with_capacity(ops), Samples::with_capacity(ops));
    for _ in 0..ops {
        let mut locksmith = Command::new(&installed.path);
        locksmith.args(["--url", url, "run", &name, "--", "true"]);
        ours.push(time(locksmith).await?);
        pb.inc(1);
        let mut flock = Command::new("flock");
        flock.arg(&flock_file).arg("true");
        theirs.push(time(flock).await?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    // Which build ran: `dist/locksmith` (as shipped) or `release/locksmith`, say.
    let build = built
        .ancestors()
        .nth(2)
        .and_then(|target| built.strip_prefix(target).ok())
        .unwrap_or(&built);
    let ours = row("locksmith", &ours).param("measured_bin", build.display().to_string());
    Ok(vec![ours, row("flock(1)", &theirs)])
}

/// A copy of the command in a directory of its own, run in place of the build: as `cargo install`
/// copies it, and as `flock(1)` was installed. A binary the linker has just written runs 15–20%
/// slower here (each page fault of its start costs more) until its pages leave the page cache;
/// a copy of the same bytes does not (measured, 2026-11-30). Removed when dropped.
struct Installed {
    dir: PathBuf,
    path: PathBuf,
}

impl Installed {
    fn copy(built: &Path) -> Result<Installed> {
        let dir = std::env::temp_dir().join(format!("lockbench-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("locksmith");
        std::fs::copy(built, &path).with_context(|| format!("copying {} to {}", built.display(), path.display()))?;
        Ok(Installed { dir, path })
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The wall time of one run of `cmd`, which must succeed: started and waited for by a thread
/// that blocks in `wait`, as a shell does (not through the runtime's reaping of children, whose
/// worker threads then compete for the two cores with the command's own processes).
async fn time(mut cmd: Command) -> Result<std::time::Duration> {
    tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        let out = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running {:?}", program(&cmd)))?;
        let elapsed = t0.elapsed();
        if !out.status.success() {
            return Err(anyhow!(
                "{:?} failed ({}): {}",
                program(&cmd),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(elapsed)
    })
    .await?
}

fn program(cmd: &Command) -> &Path {
    Path::new(cmd.get_program())
}

fn row(system: &str, samples: &Samples) -> Record {
    let mut r = Record::new(system, "file", "cli");
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5).map(round3);
    r.p99_us = samples.quantile(0.99).map(round3);
    r
}
