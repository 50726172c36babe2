//! Opening the files of the lock directory without following symbolic links.
//!
//! A directory that other users may write (a shared one, or anything under `/tmp`) may hold a
//! link that one of them planted where locksmith is about to write: `.<stem>.tmp` pointing at a
//! file of root's would have root's `locksmith run` truncate it and write JSON into it, and a
//! dangling `<stem>.lock` would have it create the file the link names. Every file locksmith
//! opens in the directory is therefore opened with `O_NOFOLLOW` (a link is refused, see
//! [`crate::error::open_error`]), and a file it writes is one it has just created itself
//! (`O_EXCL`: never one that was there before, a link or a hard link).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;

/// `O_NOFOLLOW`, as [`OpenOptionsExt::custom_flags`] takes it.
const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// [`OpenOptions`] that refuse a symbolic link as the last component of the path.
pub(crate) fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.custom_flags(NOFOLLOW);
    options
}

/// Whether `err` is what opening a symbolic link with [`options`] fails with (`ELOOP`).
pub(crate) fn is_link(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}
