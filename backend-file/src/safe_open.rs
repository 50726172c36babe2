//! Opening the files of the lock directory without following symbolic links.
//!
//! A directory that other users may write (a shared one, or anything under `/tmp`) may hold a
//! link that one of them planted where locksmith is about to write: `.<stem>.tmp` pointing at a
//! file of root's would have root's `locksmith run` truncate it and write JSON into it, and a
//! dangling `<stem>.lock` would have it create the file the link names. Every file locksmith
//! opens in the directory is therefore opened with `O_NOFOLLOW` (a link is refused, see
//! [`crate::error::open_error`]), and a file it writes is one it has just created itself
//! (`O_EXCL`: never one that was there before, a link or a hard link).
//!
//! Nor does locksmith wait on a file that is not a regular file: opening a FIFO for reading
//! blocks until a writer comes, which would hold a lock's `flock` (in a step) or a runtime
//! thread (`inspect`, `list`) for good. Every file is opened with `O_NONBLOCK` (no effect on a
//! regular file), and one that is found to be anything else is refused ([`check_regular`]).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use locksmith_core::{LockError, Result};

/// `O_NOFOLLOW | O_NONBLOCK`, as [`OpenOptionsExt::custom_flags`] takes them.
const FLAGS: i32 = (rustix::fs::OFlags::NOFOLLOW.bits() | rustix::fs::OFlags::NONBLOCK.bits()) as i32;

/// [`FLAGS`] and `O_NOATIME` ([`open_without_atime`]).
const FLAGS_NOATIME: i32 = FLAGS | rustix::fs::OFlags::NOATIME.bits() as i32;

/// [`OpenOptions`] that refuse a symbolic link as the last component of the path, and never
/// block opening a FIFO (`O_NONBLOCK`).
pub(crate) fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.custom_flags(FLAGS);
    options
}

/// Opens `path` with `options` (from [`options`]) and `O_NOATIME`, so that reads leave the file's
/// access time alone, or without it where the kernel refuses it (`EPERM`: a file of another user,
/// opened by a process without `CAP_FOWNER`). A state file is read after every write, and under
/// `relatime` each such read set its access time: a dirtied inode, a journalled write, on every
/// step (3% of an uncontended cycle's time in a profile).
pub(crate) fn open_without_atime(options: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    options.custom_flags(FLAGS_NOATIME);
    match options.open(path) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {
            options.custom_flags(FLAGS);
            options.open(path)
        }
        other => other,
    }
}

/// `Ok` (with its metadata) if `file`, opened at `path`, is a regular file (`fstat`); otherwise
/// [`LockError::Protocol`] saying what to remove (a FIFO, a device or a directory where a lock's
/// file goes is no file of locksmith's).
pub(crate) fn check_regular(file: &File, path: &Path) -> Result<std::fs::Metadata> {
    let meta = file
        .metadata()
        .map_err(|e| LockError::unavailable(format!("cannot look at {}: {e}", path.display()), e))?;
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(meta);
    }
    tracing::warn!(path = %path.display(), "file backend: refusing a file that is not a regular file in the lock directory");
    Err(LockError::Protocol(format!(
        "{} is not a regular file ({kind:?}): locksmith does not use it; remove it if no locksmith \
         process uses it",
        path.display()
    )))
}

/// Whether `err` is what opening a symbolic link with [`options`] fails with (`ELOOP`).
pub(crate) fn is_link(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};

    /// A state file of another user (a directory shared between users) cannot be opened with
    /// `O_NOATIME` by a process without `CAP_FOWNER`: it is opened without it. Run as root (the
    /// file is given to another user, and this thread gives up `CAP_FOWNER`); as another user the
    /// test cannot make such a file and says so.
    #[test]
    fn a_file_of_another_user_opens_without_noatime() {
        let path = std::env::temp_dir().join(format!("locksmith-noatime-{:016x}", rand::random::<u64>()));
        std::fs::write(&path, b"state").unwrap();
        if rustix::fs::chown(&path, Some(rustix::fs::Uid::from_raw(65534)), None).is_err() {
            let _ = std::fs::remove_file(&path);
            eprintln!("skipped: only root can give the file to another user");
            return;
        }
        let in_thread = path.clone();
        let (refused, opened) = std::thread::spawn(move || {
            let mut sets = capabilities(None).unwrap();
            sets.effective.remove(CapabilitySet::FOWNER);
            set_capabilities(None, sets).unwrap();
            let plain = options().read(true).custom_flags(FLAGS_NOATIME).open(&in_thread);
            let ours = open_without_atime(options().read(true), &in_thread);
            (
                plain.map(|_| ()).map_err(|e| e.raw_os_error()),
                ours.map(|_| ()).map_err(|e| e.to_string()),
            )
        })
        .join()
        .unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            refused,
            Err(Some(rustix::io::Errno::PERM.raw_os_error())),
            "the kernel took O_NOATIME: the test proves nothing"
        );
        assert_eq!(opened, Ok(()), "a file of another user could not be opened");
    }
}
