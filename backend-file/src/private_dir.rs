//! The default lock directory, [`crate::default_dir`]: `/tmp/locksmith-<uid>`, in a directory
//! every user may write. Another user could create it first (or a link by its name) and so own
//! the files locksmith writes there; it is therefore created mode 0700, and used only if it is
//! this user's own directory that nobody else may write. A directory given in the URL may be
//! shared by design (several users' processes sharing locks) and is not checked (the links in it
//! are still never followed, see `safe_open.rs`).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use locksmith_core::{LockError, Result};

use crate::error::io_error;

/// Creates the default directory `path` (mode 0700) if it is missing, and checks that it is this
/// user's own (see [`check_private`]). One of this user's own that others may write (made by an
/// earlier version under a umask of 002) is made 0700 first: only its owner can change it, and
/// in the sticky `/tmp` nobody else can swap it for another between the look and the change.
pub(crate) fn prepare(path: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => tracing::debug!(dir = %path.display(), "file backend: created the default lock directory"),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error("cannot create the lock directory", path, e)),
    }
    let uid = rustix::process::getuid().as_raw();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.is_dir() && meta.uid() == uid && meta.mode() & 0o022 != 0 {
            use std::os::unix::fs::PermissionsExt;
            tracing::info!(dir = %path.display(), mode = format!("{:o}", meta.mode() & 0o7777), "file backend: making the default lock directory private (0700)");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| io_error("cannot make the lock directory private", path, e))?;
        }
    }
    check_private(path, uid)
}

/// [`LockError::Denied`] unless `path` is a directory (not a link to one) owned by `uid` that
/// neither its group nor others may write.
pub(crate) fn check_private(path: &Path, uid: u32) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| io_error("cannot open the lock directory", path, e))?;
    let problem = if meta.file_type().is_symlink() {
        "is a symbolic link".to_owned()
    } else if !meta.is_dir() {
        "is not a directory".to_owned()
    } else if meta.uid() != uid {
        format!("belongs to uid {}, not to this user (uid {uid})", meta.uid())
    } else if meta.mode() & 0o022 != 0 {
        format!("may be written by other users (mode {:o})", meta.mode() & 0o7777)
    } else {
        return Ok(());
    };
    tracing::warn!(dir = %path.display(), problem, "file backend: refusing the default lock directory");
    Err(LockError::Denied(format!(
        "the default lock directory {} {problem}: another user may have made it to take over \
         locksmith's files. Remove it (locksmith creates it again, mode 0700), or give a directory \
         of your own with --url or LOCKSMITH_URL",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_default_directory_must_be_private() {
        let dir = std::env::temp_dir().join(format!("locksmith-private-{:016x}", rand::random::<u64>()));
        let uid = rustix::process::getuid().as_raw();
        prepare(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "created mode {mode:o}");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = check_private(&dir, uid);
        assert!(matches!(refused, Err(LockError::Denied(_))), "mode 0777: {refused:?}");
        // One of the user's own that others may write (an earlier version's, under umask 002)
        // is made private rather than refused.
        prepare(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "prepared mode {mode:o}");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_private(&dir, uid).unwrap();
        assert!(
            matches!(check_private(&dir, uid.wrapping_add(1)), Err(LockError::Denied(_))),
            "another user's directory"
        );

        let link = dir.with_extension("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(matches!(check_private(&link, uid), Err(LockError::Denied(_))), "a link");

        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }
}
