//! Bad URLs and paths, odd names, absurd TTLs, a directory that cannot be written, bad guarded
//! keys and a damaged data store: the errors a user sees first. Each is a clear error, never a
//! panic, and none leaves a lock held or an entry behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::FileHarness;
use locksmith_core::conformance::{unique_name, Harness};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockError, Locker, MAX_NAME_LEN, MAX_TTL};

async fn connect(url: &str) -> locksmith_core::Result<Locker> {
    locksmith_file::connect(&BackendUrl::parse(url)?).await
}

/// The entries left in the state file of mutex `name` of `h`'s directory.
fn entries(h: &FileHarness, name: &str) -> Vec<String> {
    h.look
        .entries(Family::Mutex, &LockName::new(name).unwrap())
        .expect("reading the state file")
}

#[tokio::test]
async fn bad_urls_are_invalid_url() {
    let h = FileHarness::new();
    let dir = h.dir.display().to_string();
    let long_part = "d".repeat(256);
    for bad in [
        "file://".to_owned(),
        "file://server/locks".to_owned(),
        "file://h1,h2/locks".to_owned(),
        "file://localhost:8080/locks".to_owned(),
        "file://user:secret@localhost/locks".to_owned(),
        format!("file://{dir}?nope=1"),
        format!("file://{dir}?ttl=0s"),
        format!("file://{dir}?ttl=forever"),
        format!("file://{dir}?ttl=-1s"),
        format!("file://{dir}?ttl={}s", MAX_TTL.as_secs() + 1),
        format!("file://{dir}?request_timeout=0"),
        format!("file://{dir}?request_timeout=soon"),
        format!("file://{dir}?sync=sometimes"),
        // A path through a file, a name longer than file systems take, a NUL byte.
        "file:///etc/passwd/locks".to_owned(),
        format!("file://{dir}/{long_part}"),
        format!("file://{dir}/a%00b"),
    ] {
        match connect(&bad).await {
            Err(LockError::InvalidUrl { .. }) => {}
            other => panic!("{bad}: expected InvalidUrl, got {other:?}"),
        }
    }
    // The secret of a refused URL is not in its error.
    let refused = connect("file://user:secret@localhost/locks").await.err().unwrap();
    assert!(!format!("{refused} {refused:?}").contains("secret"), "{refused:?}");
}

/// A directory nobody may create (in `/sys`, even as root) is `Denied`, with its path.
#[tokio::test]
async fn a_directory_that_cannot_be_made_is_denied() {
    match connect("file:///sys/locksmith-bad-input/locks").await {
        Err(LockError::Denied(message)) => assert!(message.contains("/sys/locksmith-bad-input"), "{message}"),
        other => panic!("expected Denied, got {other:?}"),
    }
}

/// Names the file system would choke on (slashes, dots, upper case, `%`, unicode, the longest
/// name) are locks of their own, held at once side by side; names that are no lock names are
/// refused with `InvalidName`. Nothing is left once they are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_names_are_locks_or_clear_errors() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let base = unique_name("odd");
    let longest = format!("{base}{}", "é".repeat((MAX_NAME_LEN - base.len()) / 2));
    let odd = [
        format!("{base}/a"),
        format!("{base}/A"),
        format!("{base}/../a"),
        format!("{base}/./a"),
        format!("{base}/%2F"),
        format!("{base}%2F"),
        format!("{base}/.lock"),
        format!("{base}.state"),
        format!("{base}/ä ö\t"),
        format!("{base}/\u{202e}rtl"),
        longest.clone(),
        format!("{}b", &longest[..longest.len() - 2]),
    ];
    let mut guards = Vec::new();
    for name in &odd {
        let guard = locker
            .lock(name)
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e:?}"))
            .unwrap_or_else(|| panic!("{name:?} was taken: it shares a file with another name"));
        guards.push(guard);
    }
    let too_long = "x".repeat(MAX_NAME_LEN + 1);
    for bad in ["", "a\0b", too_long.as_str()] {
        let r = locker.lock(bad).try_acquire().await;
        assert!(matches!(r, Err(LockError::InvalidName(_))), "{bad:?}: {r:?}");
        let r = locker.inspect(bad).await;
        assert!(matches!(r, Err(LockError::InvalidName(_))), "inspect {bad:?}: {r:?}");
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
    for name in &odd {
        assert_eq!(entries(&h, name), Vec::<String>::new(), "{name:?}");
    }
    // The directory holds nothing but the locks' own files.
    for file in std::fs::read_dir(&h.dir).unwrap() {
        let name = file.unwrap().file_name().into_string().unwrap();
        assert!(
            name.starts_with('.') || name.ends_with(".lock") || name.ends_with(".state"),
            "{name}"
        );
    }
}

/// TTLs and timeouts nobody can mean are `InvalidOption` before anything is written; the
/// largest TTL is a lock like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_ttls_and_counts_are_clear_errors() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let name = unique_name("absurd");
    for ttl in [
        Duration::ZERO,
        Duration::from_nanos(1),
        MAX_TTL + Duration::from_nanos(1),
        Duration::MAX,
    ] {
        let r = locker.lock(&name).ttl(ttl).acquire().await;
        assert!(matches!(r, Err(LockError::InvalidOption(_))), "ttl {ttl:?}: {r:?}");
        let r = locker.semaphore(&name, 2).ttl(ttl).try_acquire().await;
        assert!(
            matches!(r, Err(LockError::InvalidOption(_))),
            "permit ttl {ttl:?}: {r:?}"
        );
    }
    let r = locker.lock(&name).timeout(Duration::MAX).acquire().await;
    assert!(matches!(r, Err(LockError::InvalidOption(_))), "{r:?}");
    let r = locker.semaphore(&name, 0).try_acquire().await;
    assert!(matches!(r, Err(LockError::InvalidOption(_))), "0 permits: {r:?}");
    assert!(entries(&h, &name).is_empty(), "a refused request left an entry");
    let longest = locker
        .lock(&name)
        .ttl(MAX_TTL)
        .acquire()
        .await
        .expect("the largest TTL");
    assert_eq!(entries(&h, &name).len(), 1);
    longest.release().await.expect("release");
    assert!(entries(&h, &name).is_empty());
}

/// Guarded keys the store cannot take, or that name locksmith's own files, are refused with
/// `InvalidName` and write nothing; keys that look like paths out of the directory are keys like
/// any other, written in the store and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_guarded_keys_are_refused_and_odd_ones_stay_in_the_store() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let name = unique_name("keys");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let store = guard.guarded();
    let state = h.look.state_path(Family::Mutex, &LockName::new(&name).unwrap());
    let canonical = h.dir.canonicalize().unwrap();
    for key in [
        state.display().to_string(),
        format!("{}/", h.dir.display()),
        format!("{}/anything", canonical.display()),
    ] {
        let r = store.put(&key, "x").await;
        assert!(
            matches!(&r, Err(LockError::InvalidName(m)) if m.contains("namespace")),
            "{key}: {r:?}"
        );
    }
    let before = std::fs::read(&state).unwrap();
    let outside = std::env::temp_dir().join(format!("locksmith-bad-input-{:016x}", rand::random::<u64>()));
    let odd = [
        format!("../../{}", outside.display()),
        outside.display().to_string(),
        "/".to_owned(),
        ".".to_owned(),
        "..".to_owned(),
        ".lock".to_owned(),
        "K".to_owned(),
        "k".to_owned(),
        "é/%00".to_owned(),
        "x".repeat(1024),
        format!("{}y", "x".repeat(1023)),
    ];
    for (i, key) in odd.iter().enumerate() {
        store
            .put(key, i.to_string())
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e:?}"));
    }
    for (i, key) in odd.iter().enumerate() {
        assert_eq!(
            store.get(key).await.expect("get").as_deref(),
            Some(i.to_string().as_bytes()),
            "{key:?}"
        );
    }
    assert!(!outside.exists(), "a key was written at its path");
    assert_eq!(
        std::fs::read(&state).unwrap(),
        before,
        "a guarded write changed the state file"
    );
    for key in &odd {
        assert!(store.delete(key).await.expect("delete"), "{key:?}");
    }
    assert!(guard.is_held());
    guard.release().await.expect("release");
    assert!(entries(&h, &name).is_empty());
}

/// A data store that is not what locksmith made (a link planted at `.data`, a file there, a
/// value's file replaced by something else) fails the calls that use it with a clear error;
/// nothing is written through the link, and the lock is released all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_data_store_is_a_clear_error() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let name = unique_name("damaged");
    let key = "/bad-input/value";
    let data = h.dir.join(".data");

    // A link to a directory elsewhere: refused, nothing written there.
    let elsewhere = temp_dir("elsewhere");
    std::os::unix::fs::symlink(&elsewhere, &data).unwrap();
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let r = guard.guarded().put(key, "v").await;
    assert!(matches!(r, Err(LockError::Denied(_))), "a link at .data: {r:?}");
    let r = guard.guarded().get(key).await;
    assert!(matches!(r, Err(LockError::Denied(_))), "a link at .data: {r:?}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "written through the link"
    );
    std::fs::remove_file(&data).unwrap();

    // A plain file at `.data`.
    std::fs::write(&data, "not a directory").unwrap();
    let r = guard.guarded().put(key, "v").await;
    assert!(
        matches!(&r, Err(LockError::Protocol(m)) if m.contains("not a directory")),
        "a file at .data: {r:?}"
    );
    std::fs::remove_file(&data).unwrap();

    // A value's file replaced by something else, and emptied: reads and writes say so.
    guard.guarded().put(key, "v").await.expect("put");
    let value_file = only_value_file(&data);
    for damage in [&b"garbage"[..], &b""[..]] {
        std::fs::write(&value_file, damage).unwrap();
        let r = guard.guarded().get(key).await;
        assert!(
            matches!(&r, Err(LockError::Protocol(m)) if m.contains("not a value")),
            "{damage:?}: {r:?}"
        );
        let r = guard.guarded().compare_and_set(key, None, "w").await;
        assert!(matches!(r, Err(LockError::Protocol(_))), "{damage:?}: {r:?}");
    }
    // A put replaces it whole (a value nobody can read any more is not worth keeping from it).
    std::fs::remove_file(&value_file).unwrap();
    guard.guarded().put(key, "again").await.expect("put");
    assert_eq!(guard.guarded().get(key).await.unwrap().as_deref(), Some(&b"again"[..]));

    assert!(guard.is_held());
    guard.release().await.expect("release");
    assert!(entries(&h, &name).is_empty());
    let _ = std::fs::remove_dir_all(&elsewhere);
}

/// A lock directory on a read-only file system is `Denied` at connect, naming the cause; once
/// it is writable again the same URL works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_directory_is_denied() {
    let Some(fs) = Tmpfs::mount(&temp_dir("ro"), "rw") else {
        return;
    };
    std::fs::create_dir(fs.dir.join("locks")).unwrap();
    let url = format!("file://{}/locks", fs.dir.display());
    fs.remount("ro");
    match connect(&url).await {
        Err(LockError::Denied(m)) => assert!(m.contains("Read-only"), "{m}"),
        other => panic!("expected Denied, got {other:?}"),
    }
    fs.remount("rw");
    let locker = connect(&url).await.expect("connect once writable");
    let name = unique_name("ro");
    let guard = locker.lock(&name).try_acquire().await.unwrap().expect("free");
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A data store on a read-only file system (mounted at `.data`): guarded writes are `Denied`,
/// naming the cause, and write nothing; reads answer; the lock is held throughout and released
/// as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_store_is_denied() {
    let h = FileHarness::new();
    let locker = h.locker().await;
    let name = unique_name("ro_data");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let data = h.dir.join(".data");
    std::fs::create_dir(&data).unwrap();
    let Some(fs) = Tmpfs::mount(&data, "ro") else { return };
    let key = "/bad-input/read-only";
    let r = guard.guarded().put(key, "v").await;
    assert!(
        matches!(&r, Err(LockError::Denied(m)) if m.contains("Read-only")),
        "{r:?}"
    );
    let r = guard.guarded().compare_and_set(key, None, "v").await;
    assert!(
        matches!(&r, Err(LockError::Denied(m)) if m.contains("Read-only")),
        "{r:?}"
    );
    assert_eq!(guard.guarded().get(key).await.expect("a read"), None);
    assert!(guard.is_held());
    guard.release().await.expect("release");
    assert!(entries(&h, &name).is_empty());
    drop(fs);
}

/// The one value's file in the store `data`.
fn only_value_file(data: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .map(|f| f.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("locksmith-bad-input-{what}-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tmpfs mounted (`mode`: `rw` or `ro`) on the directory `dir` (it needs root, which CI has:
/// the test says so and passes over itself elsewhere); unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, mode: &str) -> Option<Tmpfs> {
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("{mode},size=4m,mode=0755"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("bad_input: cannot mount a tmpfs here (needs root): this test checks nothing on this machine");
            return None;
        }
        Some(Tmpfs { dir: dir.to_owned() })
    }

    /// Remounts it `rw` or `ro` (nothing may be open for writing in it).
    fn remount(&self, mode: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.dir)
            .status()
            .expect("mount");
        assert!(status.success(), "remount {mode}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}
