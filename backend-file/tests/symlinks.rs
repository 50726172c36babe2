//! Links planted in the lock directory by another user are never followed: locksmith does not
//! write, truncate or create the file a link names (the attack on a shared `/tmp` directory,
//! where root's cron job would overwrite a file of the attacker's choosing).

mod common;

use std::path::{Path, PathBuf};

use common::FileHarness;
use locksmith_core::conformance::Harness;
use locksmith_core::driver::LockName;
use locksmith_core::{Family, LockError};

/// The file-name stem of the mutex `name` in the harness's directory.
fn stem(h: &FileHarness, name: &str) -> String {
    let state = h.look.state_path(Family::Mutex, &LockName::new(name).unwrap());
    let file_name = state.file_name().unwrap().to_str().unwrap();
    file_name.strip_suffix(".state").unwrap().to_owned()
}

/// A victim file with known contents, outside the lock directory.
fn victim(h: &FileHarness, what: &str) -> PathBuf {
    let path = h.dir.with_extension(format!("victim-{what}"));
    std::fs::write(&path, "the victim's data").unwrap();
    path
}

/// Plants a link at `name` in the harness's directory, to `target`.
fn plant(h: &FileHarness, name: &str, target: &Path) {
    std::os::unix::fs::symlink(target, h.dir.join(name)).unwrap();
}

/// A link at the temporary state file `.<stem>.tmp` is removed, not written through: the lock
/// works and the file it named is untouched.
#[tokio::test]
async fn a_linked_temporary_file_is_not_written_through() {
    let h = FileHarness::new();
    let target = victim(&h, "tmp");
    plant(&h, &format!(".{}.tmp", stem(&h, "nightly")), &target);
    let locker = h.locker().await;
    let guard = locker.lock("nightly").try_acquire().await.unwrap().expect("free");
    guard.release().await.unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "the victim's data");
    std::fs::remove_file(&target).unwrap();
}

/// A link at a lock file `<stem>.lock` is refused with `Denied`: neither the file it names is
/// created (a dangling link) nor one that exists changed.
#[tokio::test]
async fn a_linked_lock_file_is_refused() {
    let h = FileHarness::new();
    let missing = h.dir.with_extension("victim-created");
    plant(&h, &format!("{}.lock", stem(&h, "job")), &missing);
    let existing = victim(&h, "lock");
    plant(&h, &format!("{}.lock", stem(&h, "other")), &existing);
    let locker = h.locker().await;
    for name in ["job", "other"] {
        let refused = locker.lock(name).try_acquire().await;
        assert!(matches!(refused, Err(LockError::Denied(_))), "{name}: {refused:?}");
    }
    assert!(
        !missing.exists(),
        "locksmith created the file a planted lock file names"
    );
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "the victim's data");
    std::fs::remove_file(&existing).unwrap();
}
