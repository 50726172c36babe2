//! The locksmith redis backend (not implemented yet; see its issue).

use lockcore::{BackendUrl, LockError, Locker, Result};

/// Connects to redis as described by `url`.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Err(url.error("the redis backend is not implemented yet"))
}

#[doc(hidden)]
pub fn _unused(_: LockError) {}
