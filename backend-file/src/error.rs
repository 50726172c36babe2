//! File-system errors → [`LockError`]: what the caller can do about them.

use std::io;
use std::path::Path;

use locksmith_core::LockError;

/// The error for `what` failing on `path`: [`LockError::Denied`] when the process may not write
/// there (permissions, a read-only file system), [`LockError::Unavailable`] otherwise (a full disk,
/// a directory removed under the locker: maybe worth retrying).
pub(crate) fn io_error(what: &str, path: &Path, err: io::Error) -> LockError {
    let message = format!("{what} {}: {err}", path.display());
    match err.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => LockError::Denied(message),
        _ => LockError::unavailable(message, err),
    }
}

/// [`io_error`] for opening `path` with [`crate::safe_open::options`]: a symbolic link there is
/// [`LockError::Denied`], saying that locksmith does not follow it (another user may have planted
/// it to make locksmith write elsewhere).
pub(crate) fn open_error(what: &str, path: &Path, err: io::Error) -> LockError {
    if crate::safe_open::is_link(&err) {
        tracing::warn!(path = %path.display(), "file backend: refusing a symbolic link in the lock directory");
        return LockError::Denied(format!(
            "{what} {}: it is a symbolic link, which locksmith does not follow in its lock directory \
             (someone may have planted it to make locksmith write elsewhere); remove it",
            path.display()
        ));
    }
    io_error(what, path, err)
}

/// [`io_error`] for a `rustix` call.
pub(crate) fn errno_error(what: &str, path: &Path, err: rustix::io::Errno) -> LockError {
    io_error(what, path, io::Error::from(err))
}

/// Whether `e` is a read or write that failed but may work later (an I/O error, a right missing
/// for now), rather than a file that is not locksmith's: a lease is not known to be gone after
/// it, and its removal is tried again.
pub(crate) fn may_pass(e: &LockError) -> bool {
    matches!(e, LockError::Unavailable { .. } | LockError::Denied(_))
}

/// A state file that is not what this crate writes.
pub(crate) fn corrupt(path: &Path, err: impl std::fmt::Display) -> LockError {
    LockError::Protocol(format!(
        "{} is not a locksmith state file ({err}); remove it if no locksmith process uses it",
        path.display()
    ))
}

/// A blocking step that did not run to its end (its thread panicked or the runtime is shutting
/// down).
pub(crate) fn join_error(err: tokio::task::JoinError) -> LockError {
    LockError::unavailable("a file-system step did not finish", err)
}
