//! `locksmith try NAME`: one attempt, no waiting.

use std::time::Duration;

use serde_json::json;

use crate::args::TryArgs;
use crate::exit::{Failure, NOT_ACQUIRED};
use crate::session::Session;

/// Acquires NAME (or one of its permits, or a side of it) if it is free, prints the fencing token
/// and releases (exit 0); exit 1 if held. `--timeout` bounds the attempt: a backend that does not
/// answer within it is exit 3, after the attempt's clean-up (half a second more at most), so that
/// the command leaves nothing held.
pub async fn try_once(session: &Session, args: &TryArgs) -> Result<u8, Failure> {
    let name = args.name.as_str();
    let locker = session.connect().await?;
    let mut builder = session.request(&locker, name, args.kind.kind());
    if let Some(left) = session.time_left() {
        builder = builder.timeout(left.max(Duration::from_millis(1)));
    }
    match builder.try_acquire().await? {
        Some(guard) => {
            session.out.acquired(&guard);
            guard.release().await?;
            Ok(0)
        }
        None => {
            session.out.status(format_args!("{name:?} is held by another holder"));
            if session.out.json {
                session.out.result("", json!({ "name": name, "acquired": false }));
            }
            Ok(NOT_ACQUIRED)
        }
    }
}
