//! `locksmith inspect NAME`: who holds a lock and how many wait.

use serde_json::json;

use crate::exit::{Failure, UNAVAILABLE};
use crate::output::{human, millis};
use crate::session::Session;

/// Prints the holder (id, fencing token, remaining TTL) and the number of waiters of NAME.
/// `--timeout` bounds the whole command (exit 3 when the backend does not answer within it).
pub async fn inspect(session: &Session, name: &str) -> Result<u8, Failure> {
    session.reject_ttl("inspect")?;
    let locker = session.connect().await?;
    let info = match session.time_left() {
        None => locker.inspect(name).await?,
        Some(left) => match tokio::time::timeout(left, locker.inspect(name)).await {
            Ok(info) => info?,
            Err(_) => {
                return Err(Failure::new(
                    UNAVAILABLE,
                    format!("backend unavailable: no answer within {} (--timeout)", human(left)),
                ))
            }
        },
    };
    let unknown = || "unknown".to_owned();
    let text = match &info.holder {
        Some(h) => format!(
            "name: {name}\nheld: yes\nholder: {}\nfencing token: {}\nttl remaining: {}\nwaiters: {}",
            h.holder_id,
            h.fencing_token.map_or_else(unknown, |t| t.to_string()),
            h.ttl_remaining.map_or_else(unknown, human),
            info.waiters
        ),
        None => format!("name: {name}\nheld: no\nwaiters: {}", info.waiters),
    };
    let value = json!({
        "name": name,
        "held": info.holder.is_some(),
        "holder_id": info.holder.as_ref().map(|h| h.holder_id.clone()),
        "fencing_token": info.holder.as_ref().and_then(|h| h.fencing_token),
        "ttl_remaining_ms": info.holder.as_ref().and_then(|h| h.ttl_remaining).map(millis),
        "waiters": info.waiters,
    });
    session.out.result(text, value);
    Ok(0)
}
