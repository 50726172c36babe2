//! What a guarded write is ([`GuardedWrite`]) and the rules every backend applies to it: the key
//! and value limits, keys of a backend's own namespace refused. Guarded writes are writes to the
//! coordination store itself that commit only while a lock is held, checked by the server in the
//! same atomic step as the write (an etcd transaction, a ZooKeeper `multi`, one Redis script, one
//! PostgreSQL statement). Users reach them through [`crate::LockGuard::guarded`] (the handle is in
//! `store.rs`); backends implement [`crate::driver::LockBackend::write_guarded`].

use std::fmt;

use crate::error::{LockError, Result};

/// The longest key a guarded write takes, in bytes.
pub const MAX_GUARDED_KEY_LEN: usize = 1024;

/// The largest value a guarded write takes, in bytes (below every backend's request limit:
/// ZooKeeper's `jute.maxbuffer` of 1 MiB is the smallest).
pub const MAX_GUARDED_VALUE_LEN: usize = 512 * 1024;

/// One write that commits only if the lease is still held, atomically with that check.
///
/// A key is the backend's own key: an etcd key, a Redis key, a ZooKeeper path (absolute, its
/// parents created as needed), an entry of the memory backend's store. Keys inside the backend's
/// lock namespace are refused: locksmith's own keys are not data.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardedWrite {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: String,
        /// Its new value.
        value: Vec<u8>,
    },
    /// Removes `key`.
    Delete {
        /// The key.
        key: String,
    },
    /// Sets `key` to `value` only if its value is now `expected` (`None`: only if it is absent).
    CompareAndSet {
        /// The key.
        key: String,
        /// The value it must have now, or `None` if it must not exist.
        expected: Option<Vec<u8>>,
        /// Its new value.
        value: Vec<u8>,
    },
}

impl GuardedWrite {
    /// The key written.
    ///
    /// # Examples
    ///
    /// ```
    /// use locksmith_core::driver::GuardedWrite;
    /// let write = GuardedWrite::Delete { key: "/billing/tmp".into() };
    /// assert_eq!(write.key(), "/billing/tmp");
    /// ```
    pub fn key(&self) -> &str {
        match self {
            GuardedWrite::Put { key, .. } | GuardedWrite::Delete { key } | GuardedWrite::CompareAndSet { key, .. } => {
                key
            }
        }
    }

    /// Checks the key and the values against [`MAX_GUARDED_KEY_LEN`] and [`MAX_GUARDED_VALUE_LEN`].
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for an empty key, a key longer than [`MAX_GUARDED_KEY_LEN`] or with a
    /// NUL byte; [`LockError::InvalidOption`] for a value larger than [`MAX_GUARDED_VALUE_LEN`].
    ///
    /// # Examples
    ///
    /// ```
    /// use locksmith_core::driver::GuardedWrite;
    /// use locksmith_core::{LockError, MAX_GUARDED_VALUE_LEN};
    /// let big = GuardedWrite::Put { key: "/k".into(), value: vec![0; MAX_GUARDED_VALUE_LEN + 1] };
    /// assert!(matches!(big.validate(), Err(LockError::InvalidOption(_))));
    /// assert!(GuardedWrite::Delete { key: "/k".into() }.validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<()> {
        validate_key(self.key())?;
        let values: [Option<&Vec<u8>>; 2] = match self {
            GuardedWrite::Put { value, .. } => [Some(value), None],
            GuardedWrite::Delete { .. } => [None, None],
            GuardedWrite::CompareAndSet { expected, value, .. } => [Some(value), expected.as_ref()],
        };
        for value in values.into_iter().flatten() {
            if value.len() > MAX_GUARDED_VALUE_LEN {
                return Err(LockError::InvalidOption(format!(
                    "a guarded write's value is {} bytes; the limit is {MAX_GUARDED_VALUE_LEN}",
                    value.len()
                )));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for GuardedWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, len) = match self {
            GuardedWrite::Put { value, .. } => ("Put", Some(value.len())),
            GuardedWrite::Delete { .. } => ("Delete", None),
            GuardedWrite::CompareAndSet { value, .. } => ("CompareAndSet", Some(value.len())),
        };
        f.debug_struct(op)
            .field("key", &self.key())
            .field("value_len", &len)
            .finish()
    }
}

/// Checks a key of the guarded store: not empty, at most [`MAX_GUARDED_KEY_LEN`] bytes, no NUL byte.
///
/// # Errors
///
/// [`LockError::InvalidName`] saying which rule the key breaks.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// use locksmith::driver::validate_key;
/// assert!(validate_key("/billing/cursor").is_ok());
/// assert!(validate_key("").is_err());
/// ```
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(LockError::InvalidName("a guarded key must not be empty".into()));
    }
    if key.len() > MAX_GUARDED_KEY_LEN {
        return Err(LockError::InvalidName(format!(
            "a guarded key is {} bytes; the limit is {MAX_GUARDED_KEY_LEN}",
            key.len()
        )));
    }
    if key.contains('\0') {
        return Err(LockError::InvalidName(
            "a guarded key must not contain a NUL byte".into(),
        ));
    }
    Ok(())
}

/// A lock's data key under `base` ([`crate::driver::LockBackend::data_key`]):
/// `<base>/<family segment of lock>/<encoded suffix>`, checked by [`validate_key`].
///
/// # Errors
///
/// [`LockError::InvalidName`] for a suffix that breaks the rules of lock names, or a key too long.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// use locksmith::{driver::{data_key_under, LockName}, Family};
/// let key = data_key_under("/locksmith-data", Family::Mutex, &LockName::new("billing")?, "cursor")?;
/// assert_eq!(key, "/locksmith-data/billing/cursor");
/// # Ok::<(), locksmith::LockError>(())
/// ```
pub fn data_key_under(
    base: &str,
    family: crate::lease::Family,
    lock: &crate::name::LockName,
    suffix: &str,
) -> Result<String> {
    let suffix = crate::name::LockName::new(suffix)?;
    let key = format!("{base}/{}/{}", family.segment(lock), suffix.encoded());
    validate_key(&key)?;
    Ok(key)
}

/// The refusal of a key inside a backend's own namespace (`namespace` is where its lock keys
/// live), for backends to return from [`crate::driver::LockBackend::write_guarded`].
///
/// # Errors
///
/// [`LockError::InvalidName`] when `key` starts with `namespace` (a non-empty one).
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// use locksmith::driver::refuse_if_inside;
/// assert!(refuse_if_inside("/locksmith/orders", "/locksmith/").is_err());
/// assert!(refuse_if_inside("/app/orders", "/locksmith/").is_ok());
/// ```
pub fn refuse_if_inside(key: &str, namespace: &str) -> Result<()> {
    if !namespace.is_empty() && key.starts_with(namespace) {
        return Err(LockError::InvalidName(format!(
            "the guarded key {key:?} is inside locksmith's namespace {namespace:?}: lock keys are not data"
        )));
    }
    Ok(())
}

/// Applies `write` to an in-memory map (the memory backend's store), once its lease was checked;
/// what [`crate::driver::LockBackend::write_guarded`] answers.
pub(crate) fn apply_to_map(data: &mut std::collections::HashMap<String, Vec<u8>>, write: &GuardedWrite) -> bool {
    match write {
        GuardedWrite::Put { key, value } => {
            data.insert(key.clone(), value.clone());
            true
        }
        GuardedWrite::Delete { key } => data.remove(key).is_some(),
        GuardedWrite::CompareAndSet { key, expected, value } => {
            if data.get(key) != expected.as_ref() {
                return false;
            }
            data.insert(key.clone(), value.clone());
            true
        }
    }
}
