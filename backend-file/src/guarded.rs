//! Guarded writes ([`locksmith_core::Guarded`]) on lock files: a small key-value store in the
//! directory's `.data/`, written only inside a transaction on the guard's own lock (`conn/txn.rs`:
//! its lock file's `flock` held, its state read and its dead entries dropped), and only if the
//! guard's entry is still there, granted with the guard's fencing token. The check and the write
//! are one step under that `flock`: a release, an expiry found by another process, or the grant
//! to the next holder each needs the same `flock` to remove the entry, so a write lands before
//! the lock can change hands, or not at all. A state file removed by hand has no entry: `NotHeld`.
//!
//! - **One file per key**: `.data/<name>`, the name the key percent-encoded (every byte but
//!   `[a-z0-9_-]`, so names never start with `.`, stay apart on case-insensitive file systems and
//!   never hold a `/`), cut to [`MAX_NAME`] bytes and ended with `~` and a hash of the key when
//!   longer. The file holds the whole key, so two keys cut to one name are told apart (the second
//!   is refused, never mixed up with the first), and a checksum: `b"LSD1" | crc32c | key length
//!   (u32) | value length (u32) | key | value` (little-endian; the crc32c covers everything after
//!   it). A key that is absent has no file.
//! - **Crash safety: a temporary file renamed into place**, not the state file's checksummed
//!   frames written in place (`conn/record.rs`). A value is replaced whole at every write (the
//!   state file changes by small steps, many times a second, where writing in place saves a
//!   create, a rename and a directory entry per step); two frames of up to 512 KiB each would
//!   double the file for nothing; and a rename lets [`read`] (a plain read, without any `flock`)
//!   see the old file or the new one, never a mix. A process killed in the middle of a write
//!   leaves the value before it and a temporary `.<name>.tmp`, removed by the next write of that
//!   key (and, for a new key, its lock file). With `sync=grant` (the default) the temporary file is synced before the rename and the
//!   directory after it (a delete: the directory after the unlink), so a write that answered
//!   survives a power cut; `sync=off` skips the syncs (a write survives a process crash, not
//!   always a power cut: a file that lost its bytes fails its checksum, and reads say so).
//! - **Keys written under several locks**: the same key may be written under two different locks
//!   (each holder checks only its own lease), so every write also takes the `flock` of the key's
//!   own lock file, `.data/.<name>.lock`, after its lock's lock file and never the other way
//!   round: a compare-and-set reads and writes its key with no other write of that key in
//!   between, and writes of other keys go on beside it (a process paused in the middle of a
//!   write holds up the writes of that key alone, and the steps of the locks of their writers).
//!   A key left without a value leaves no lock file: it is removed last, its `flock` held, and a
//!   writer that waited for it finds it gone and locks a new one (as steps do with lock files).
//! - **The lock namespace**: the store is apart from the lock files, so no key can reach them;
//!   still, a key naming a path inside the lock directory (`<dir>/…`, the URL's path or its
//!   canonical one) is refused with [`LockError::InvalidName`], as keys of locksmith's own
//!   namespace are on the other backends: it looks like one of locksmith's files, and the store
//!   never writes at a key's path. Keys of [`locksmith_core::LockGuard::data_key`] (the default
//!   `/locksmith-data/…`) are always taken, even in a lock directory named `/locksmith-data`.
//! - **Files**: as every file of the directory (`safe_open.rs`), never through a symbolic link
//!   (`.data` itself is opened `O_NOFOLLOW | O_DIRECTORY`, and its files relative to it), and a
//!   written file is one just created (`O_EXCL`), mode 0664 less the umask. `locksmith prune`
//!   leaves `.data/` alone: a value lives until it is deleted.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{flock, AtFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use locksmith_core::driver::{refuse_if_inside, validate_key, GuardedWrite, Lease};
use locksmith_core::{LockError, Result};

use crate::conn::Dir;
use crate::error::{errno_error, io_error, join_error};
use crate::layout::{fnv1a, LockFile};
use crate::protocol::state::entry_id;

/// The directory of the store, in the lock directory.
pub(crate) const DATA_DIR: &str = ".data";
/// The longest file name kept as it is (file systems take 255 bytes).
const MAX_NAME: usize = 200;
/// The magic and format of a value's file.
const MAGIC: &[u8; 4] = b"LSD1";
/// Magic, checksum and the two lengths.
const HEADER: usize = 16;
/// The base of the default data keys ([`locksmith_core::driver::LockBackend::data_key`]).
const DATA_KEY_BASE: &str = "/locksmith-data/";

/// CRC-32C, as the state file's frames use.
const CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// Applies `write` if `lease` still holds (see the module docs): `Ok(true)` when it applied,
/// `Ok(false)` when it did not (nothing to delete, a value that differs).
///
/// # Errors
///
/// [`LockError::NotHeld`] when the lease's entry is gone (nothing written);
/// [`LockError::InvalidName`] for a key inside the lock directory (`config_dir`: the URL's
/// path), or one whose file name is taken by another key; [`LockError::Closed`] after
/// `shutdown`; [`LockError::Denied`] and [`LockError::Unavailable`] for what the file system
/// answers; [`LockError::Protocol`] for a value's file that is not one this crate wrote.
///
/// # Cancel safety
///
/// The step runs in a blocking thread to its end whether or not the future is polled again: a
/// write whose future was dropped may or may not have landed, and if it did, it landed while
/// the lease held.
pub(crate) async fn write(dir: &Arc<Dir>, config_dir: &Path, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
    dir.check_open()?;
    write.validate()?;
    refuse_lock_paths(write.key(), &[config_dir, &dir.path])?;
    let (dir, file) = (dir.clone(), LockFile::of(lease.kind.family(), &lease.name));
    let (id, token, name) = (
        entry_id(&lease.holder_id).to_owned(),
        lease.fencing_token,
        lease.name.as_str().to_owned(),
    );
    let write = write.clone();
    tokio::task::spawn_blocking(move || {
        dir.transact(&file, |state, _| {
            let holds = state
                .entries
                .iter()
                .any(|e| *e.id == *id && e.grant.is_some_and(|g| g.token == token));
            if !holds {
                return Err(LockError::not_held(&name));
            }
            apply(&dir, &write)
        })
    })
    .await
    .map_err(join_error)?
}

/// Reads `key` (a plain read, without any `flock`: a value's file is only ever replaced whole).
///
/// # Errors
///
/// [`LockError::InvalidName`] for an invalid key, or one whose file name is another key's;
/// [`LockError::Denied`] and [`LockError::Unavailable`] for what the file system answers;
/// [`LockError::Protocol`] for a file that is not a value this crate wrote.
///
/// # Cancel safety
///
/// A read in a blocking thread: dropping the future changes nothing.
pub(crate) async fn read(dir: &Arc<Dir>, key: &str) -> Result<Option<Vec<u8>>> {
    dir.check_open()?;
    validate_key(key)?;
    let (dir, key) = (dir.clone(), key.to_owned());
    tokio::task::spawn_blocking(move || {
        let Some(store) = Store::open(&dir, false)? else {
            return Ok(None);
        };
        store.get(&key)
    })
    .await
    .map_err(join_error)?
}

/// Refuses a key naming a path inside one of `dirs` (see the module docs), but a data key.
fn refuse_lock_paths(key: &str, dirs: &[&Path]) -> Result<()> {
    if key.starts_with(DATA_KEY_BASE) {
        return Ok(());
    }
    for dir in dirs {
        let inside = format!("{}/", dir.display().to_string().trim_end_matches('/'));
        refuse_if_inside(key, &inside)?;
    }
    Ok(())
}

/// Applies `write` to the store of `dir`, whose caller holds the lease (blocking).
fn apply(dir: &Dir, write: &GuardedWrite) -> Result<bool> {
    let store = Store::open(dir, true)?.ok_or_else(|| LockError::Protocol("the data directory is missing".into()))?;
    let key = write.key();
    let name = file_name(key);
    let turn = store.lock(&name)?;
    let applied = apply_locked(&store, write);
    // A key left without a value leaves no lock file either: removed last, its `flock` held
    // (a writer waiting for it finds it gone once it has it, and opens a new one).
    if applied.is_ok() && !store.has_value(&name)? {
        store.unlock_for_good(&name, turn)?;
    }
    applied
}

/// [`apply`] with the key's lock file locked.
fn apply_locked(store: &Store, write: &GuardedWrite) -> Result<bool> {
    let key = write.key();
    match write {
        GuardedWrite::Put { value, .. } => {
            store.check_name(key)?;
            store.put(key, value)?;
            Ok(true)
        }
        GuardedWrite::Delete { .. } => store.delete(key),
        GuardedWrite::CompareAndSet { expected, value, .. } => {
            if store.get(key)? != *expected {
                return Ok(false);
            }
            store.put(key, value)?;
            Ok(true)
        }
        _ => Err(LockError::InvalidOption(format!(
            "the file backend cannot apply {write:?}"
        ))),
    }
}

/// The store's directory, open.
struct Store {
    fd: OwnedFd,
    /// Its path (for messages).
    path: std::path::PathBuf,
    /// Whether writes are synced (the URL's `sync=`).
    sync: bool,
}

/// A key's lock file with its `flock` held (unlocked when dropped, as it is closed).
struct Turn {
    _held: OwnedFd,
}

impl Store {
    /// The store of `dir` (`create`: made if missing, mode 0775 less the umask), opened without
    /// following a link; `None` if it is missing and not to be made.
    fn open(dir: &Dir, create: bool) -> Result<Option<Store>> {
        let path = dir.path.join(DATA_DIR);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(&path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o775)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(errno_error("cannot create the data directory", &path, e)),
                }
                rustix::fs::open(&path, flags, Mode::empty()).map_err(|e| dir_error(&path, e))?
            }
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(dir_error(&path, e)),
        };
        Ok(Some(Store {
            fd,
            path,
            sync: dir.syncs(),
        }))
    }

    /// The lock file of the key whose value is `name`, its `flock` held: opened (created if
    /// missing), locked, then checked to be still the file at its name (one removed meanwhile,
    /// by [`Store::unlock_for_good`] or by hand, is not locked on: the new one is).
    fn lock(&self, name: &str) -> Result<Turn> {
        let lock = lock_name(name);
        let path = self.path.join(&lock);
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        loop {
            let fd = rustix::fs::openat(&self.fd, lock.as_str(), flags, Mode::from_raw_mode(0o664))
                .map_err(|e| store_error("cannot open a guarded key's lock file", &path, e))?;
            let held = rustix::fs::fstat(&fd).map_err(|e| errno_error("cannot look at", &path, e))?;
            if rustix::fs::FileType::from_raw_mode(held.st_mode) != rustix::fs::FileType::RegularFile {
                return Err(not_regular(&path));
            }
            flock(&fd, FlockOperation::LockExclusive).map_err(|e| errno_error("cannot lock", &path, e))?;
            match rustix::fs::statat(&self.fd, lock.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(named) if named.st_dev == held.st_dev && named.st_ino == held.st_ino => {
                    return Ok(Turn { _held: fd })
                }
                _ => continue,
            }
        }
    }

    /// Whether the value's file `name` exists.
    fn has_value(&self, name: &str) -> Result<bool> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(errno_error("cannot look at", &self.path.join(name), e)),
        }
    }

    /// Removes the lock file of the key whose value is `name` (it has none now), with `turn`,
    /// its `flock`, held until it is gone.
    fn unlock_for_good(&self, name: &str, turn: Turn) -> Result<()> {
        let lock = lock_name(name);
        match rustix::fs::unlinkat(&self.fd, lock.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(errno_error("cannot remove", &self.path.join(&lock), e)),
        }
        drop(turn);
        Ok(())
    }

    /// The value of `key`, `None` if it has none.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let name = file_name(key);
        let path = self.path.join(&name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(store_error("cannot read the value", &path, e)),
        };
        let mut f = File::from(fd);
        let meta = crate::safe_open::check_regular(&f, &path)?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        f.read_to_end(&mut bytes)
            .map_err(|e| io_error("cannot read the value", &path, e))?;
        let (stored, value) = decode(&bytes).map_err(|e| {
            LockError::Protocol(format!(
                "{} is not a value locksmith wrote ({e}); remove it if the key's value may go",
                path.display()
            ))
        })?;
        if stored != key.as_bytes() {
            return Err(taken(key, &path));
        }
        Ok(Some(value.to_vec()))
    }

    /// Refuses `key` if its file name holds another key (cut names that meet).
    fn check_name(&self, key: &str) -> Result<()> {
        self.get(key).map(|_| ())
    }

    /// Writes `value` as the value of `key`: a new temporary file, synced if the store syncs,
    /// renamed over the key's file, the directory synced.
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let name = file_name(key);
        let temp = format!(".{name}.tmp");
        let (path, temp_path) = (self.path.join(&name), self.path.join(&temp));
        match rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(errno_error("cannot remove the old temporary value", &temp_path, e)),
        }
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, temp.as_str(), flags, Mode::from_raw_mode(0o664))
            .map_err(|e| store_error("cannot create the temporary value", &temp_path, e))?;
        let mut f = File::from(fd);
        let written = f.write_all(&encode(key, value)).and_then(|()| match self.sync {
            true => f.sync_data(),
            false => Ok(()),
        });
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
            return Err(io_error("cannot write the value", &path, e));
        }
        rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name.as_str())
            .map_err(|e| errno_error("cannot write the value", &path, e))?;
        self.sync_dir()
    }

    /// Removes `key`'s value; whether it had one.
    fn delete(&self, key: &str) -> Result<bool> {
        if self.get(key)?.is_none() {
            return Ok(false);
        }
        let name = file_name(key);
        match rustix::fs::unlinkat(&self.fd, name.as_str(), AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(errno_error("cannot delete the value", &self.path.join(&name), e)),
        }
        self.sync_dir()?;
        Ok(true)
    }

    /// Syncs the directory (a rename or unlink on disk), if the store syncs.
    fn sync_dir(&self) -> Result<()> {
        if self.sync {
            rustix::fs::fsync(&self.fd).map_err(|e| errno_error("cannot sync the data directory", &self.path, e))?;
        }
        Ok(())
    }
}

/// The file name of `key` in the store (see the module docs).
fn file_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        match b {
            b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    if out.len() <= MAX_NAME {
        return out;
    }
    // The encoding is ASCII: any cut is at a character boundary.
    format!("{}~{:016x}", &out[..MAX_NAME - 17], fnv1a(key.as_bytes()))
}

/// The name of the lock file of the key whose value's file is `name`.
fn lock_name(name: &str) -> String {
    format!(".{name}.lock")
}

/// The bytes of the file of `key` holding `value`.
fn encode(key: &str, value: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + key.len() + value.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
    bytes.extend_from_slice(key.as_bytes());
    bytes.extend_from_slice(value);
    let crc = CRC.checksum(&bytes[8..]);
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The key and the value in a value's file, or what is wrong with it.
fn decode(bytes: &[u8]) -> std::result::Result<(&[u8], &[u8]), String> {
    let header = bytes.get(..HEADER).ok_or("too short")?;
    if &header[..4] != MAGIC {
        return Err("no magic".into());
    }
    let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let (key_len, value_len) = (word(8) as usize, word(12) as usize);
    if bytes.len() != HEADER + key_len + value_len {
        return Err(format!(
            "{} bytes, where its header says {}",
            bytes.len(),
            HEADER + key_len + value_len
        ));
    }
    if word(4) != CRC.checksum(&bytes[8..]) {
        return Err("its checksum does not match (a write cut short by a power cut?)".into());
    }
    Ok(bytes[HEADER..].split_at(key_len))
}

/// [`errno_error`], with a symbolic link named as such.
fn store_error(what: &str, path: &Path, e: Errno) -> LockError {
    crate::error::open_error(what, path, std::io::Error::from(e))
}

/// Why the data directory at `path` could not be opened (`O_DIRECTORY | O_NOFOLLOW`): a symbolic
/// link (`ENOTDIR`, as for anything else that is no directory) is [`LockError::Denied`], saying
/// that locksmith does not follow it; anything else that is no directory is
/// [`LockError::Protocol`], saying what to remove.
fn dir_error(path: &Path, e: Errno) -> LockError {
    if e == Errno::NOTDIR {
        let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if link {
            return crate::error::open_error(
                "cannot open the data directory",
                path,
                std::io::Error::from(Errno::LOOP),
            );
        }
        return LockError::Protocol(format!(
            "{} is not a directory: locksmith keeps guarded writes' values there; remove it if no \
             locksmith process uses it",
            path.display()
        ));
    }
    store_error("cannot open the data directory", path, e)
}

/// A file of the store that is not a regular file.
fn not_regular(path: &Path) -> LockError {
    LockError::Protocol(format!(
        "{} is not a regular file: locksmith does not use it; remove it if no locksmith process uses it",
        path.display()
    ))
}

/// `key`'s file name is another key's (two long keys cut to one name).
fn taken(key: &str, path: &Path) -> LockError {
    LockError::InvalidName(format!(
        "the guarded key {key:?}'s file name ({}) is taken by another key of the same long prefix",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_apart_and_short() {
        let keys = [
            "a",
            "A",
            "/a",
            "a/",
            ".a",
            "a.",
            "%41",
            "ä",
            "..",
            "/locksmith-data/x/cursor",
        ];
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            let name = file_name(key);
            assert!(!name.contains('/') && !name.starts_with('.'), "{key:?} -> {name}");
            assert!(seen.insert(name.to_ascii_lowercase()), "{key:?} collides: {name}");
        }
        let (a, b) = ("x".repeat(1000) + "a", "x".repeat(1000) + "b");
        assert!(file_name(&a).len() <= MAX_NAME && file_name(&b).len() <= MAX_NAME);
        assert_ne!(file_name(&a), file_name(&b));
        assert!(file_name(&"É".repeat(512)).len() <= MAX_NAME);
    }

    /// A file cut short or changed is refused, never read as a value.
    #[test]
    fn a_value_reads_back_and_a_damaged_one_is_refused() {
        let bytes = encode("/k", b"value");
        assert_eq!(decode(&bytes).unwrap(), (&b"/k"[..], &b"value"[..]));
        let empty = encode("/k", b"");
        assert_eq!(decode(&empty).unwrap(), (&b"/k"[..], &b""[..]));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 0x20;
            assert!(decode(&changed).is_err(), "byte {i} changed");
        }
    }
}
