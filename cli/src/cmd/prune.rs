//! `locksmith prune [--idle DURATION] [--dry-run]`: removes what the backend keeps of idle locks.

use serde_json::json;

use crate::args::PruneArgs;
use crate::exit::Failure;
use crate::session::Session;

/// Prunes (see `locksmith prune --help`) and prints one line: `removed N locks, M owners` (with
/// `--dry-run`: `would remove …`), or one JSON object (`locks`, `owners`, `dry_run`).
/// `--timeout` bounds the whole command.
pub async fn prune(session: &Session, args: &PruneArgs) -> Result<u8, Failure> {
    session.reject_ttl("prune")?;
    let locker = session.connect().await?;
    let report = session.within_timeout(locker.prune(args.idle, args.dry_run)).await?;
    let verb = if report.dry_run { "would remove" } else { "removed" };
    session.out.result(
        format!("{verb} {} locks, {} owners", report.locks, report.owners),
        json!({ "locks": report.locks, "owners": report.owners, "dry_run": report.dry_run }),
    );
    Ok(0)
}
