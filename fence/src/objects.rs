//! Objects written with the fencing token in their metadata and a conditional put.
//!
//! [`FencedObjects::put`] reads the object's metadata (its ETag and the token it was written
//! with), refuses the write if that token is higher than the writer's, and else writes with a
//! condition on the ETag it read (`If-Match`; `If-None-Match: *` for a new object). If another
//! writer got in between, the condition fails and the put starts again from the read, so the
//! check and the write act as one step: an object written by a later holder is never
//! overwritten by an earlier one.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, PutResult,
    UpdateVersion,
};

use crate::FenceError;

/// The user-defined metadata key the token is kept under (`x-amz-meta-fencing-token` on S3).
pub const TOKEN_METADATA: &str = "fencing-token";

/// How many conditional puts lost to other writers [`FencedObjects::put`] tries by default.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 16;

/// An [`ObjectStore`] whose writes carry a fencing token and never replace a later holder's.
///
/// The store must support conditional puts (`PutMode::Create` and `PutMode::Update`) with user
/// metadata: S3 (the default `S3ConditionalPut::ETagMatch`) and S3-compatible stores that honour
/// `If-Match`, GCS and memory do. Two that `object_store` reaches do not: the local file system
/// (`LocalFileSystem` answers `NotImplemented` to `PutMode::Update` and to any attribute) and
/// Azure (metadata names must be C# identifiers there, and [`TOKEN_METADATA`] has a hyphen):
/// every put then fails with [`FenceError::Store`], never admitting a write.
///
/// # Examples
///
/// ```
/// # async fn run() -> Result<(), locksmith_fence::FenceError> {
/// use std::sync::Arc;
/// use locksmith_fence::objects::FencedObjects;
/// use object_store::{memory::InMemory, path::Path};
///
/// let objects = FencedObjects::new(Arc::new(InMemory::new()));
/// let path = Path::from("reports/daily.json");
/// objects.put(&path, 8, "written by the holder with token 8").await?;
/// let stale = objects.put(&path, 7, "a paused holder wakes up").await;
/// assert!(matches!(stale, Err(locksmith_fence::FenceError::Stale { token: 7, highest: 8 })));
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct FencedObjects {
    store: Arc<dyn ObjectStore>,
    max_attempts: u32,
}

/// What a conditional put is conditioned on: the object's absence or its version.
struct Current {
    version: Option<UpdateVersion>,
    token: u64,
}

impl FencedObjects {
    /// Fenced writes to `store`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use locksmith_fence::objects::FencedObjects;
    /// use object_store::memory::InMemory;
    ///
    /// let objects = FencedObjects::new(Arc::new(InMemory::new()));
    /// # let _ = objects;
    /// ```
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        FencedObjects {
            store,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Gives up after `attempts` conditional puts lost to other writers (at least 1).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use locksmith_fence::objects::FencedObjects;
    /// # let store = Arc::new(object_store::memory::InMemory::new());
    /// let objects = FencedObjects::new(store).with_max_attempts(4); // Contended(4) after 4 lost races
    /// # let _ = objects;
    /// ```
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Writes `payload` to `path` with `token`, unless the object there was written with a
    /// higher token. An object without a token (written around this type) counts as token 0.
    ///
    /// # Errors
    ///
    /// - [`FenceError::Stale`] if the object was written with a higher token: nothing written.
    /// - [`FenceError::Contended`] if other writers changed the object between each read and
    ///   conditional put, as many times in a row as the attempts allowed
    ///   ([`FencedObjects::with_max_attempts`], by default [`DEFAULT_MAX_ATTEMPTS`]): nothing
    ///   written.
    /// - [`FenceError::Invalid`] if the object's token metadata is not a number, or the store
    ///   gave no ETag or version to condition the write on.
    /// - [`FenceError::Store`] for any other failure of the store.
    ///
    /// # Cancel safety
    ///
    /// A put dropped before it answered may or may not have written; if it did, the object was
    /// not written with a higher token when it did.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn run() -> Result<(), locksmith_fence::FenceError> {
    /// # use std::sync::Arc;
    /// use locksmith_fence::{objects::FencedObjects, FenceError};
    /// use object_store::path::Path;
    /// # let objects = FencedObjects::new(Arc::new(object_store::memory::InMemory::new()));
    /// let path = Path::from("reports/daily.json");
    /// objects.put(&path, 8, "by the holder with token 8").await?;
    /// objects.put(&path, 8, "the same holder again").await?; // an equal token is admitted
    /// let stale = objects.put(&path, 7, "a paused holder wakes up").await;
    /// assert!(matches!(stale, Err(FenceError::Stale { token: 7, highest: 8 })));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn put(&self, path: &Path, token: u64, payload: impl Into<PutPayload>) -> Result<PutResult, FenceError> {
        let payload = payload.into();
        for _ in 0..self.max_attempts {
            let current = self.current(path).await?;
            if let Some(Current { token: highest, .. }) = current {
                if highest > token {
                    tracing::debug!(%path, token, highest, "stale fencing token refused");
                    return Err(FenceError::Stale { token, highest });
                }
            }
            let mode = match current {
                None => PutMode::Create,
                Some(Current {
                    version: Some(version), ..
                }) => PutMode::Update(version),
                Some(Current { version: None, .. }) => {
                    return Err(FenceError::Invalid(format!(
                        "{path}: the store gave no ETag or version to condition a write on"
                    )))
                }
            };
            let options = PutOptions {
                mode,
                attributes: token_attributes(token),
                ..PutOptions::default()
            };
            match self.store.put_opts(path, payload.clone(), options).await {
                Ok(result) => return Ok(result),
                Err(object_store::Error::AlreadyExists { .. }) | Err(object_store::Error::Precondition { .. }) => {
                    tracing::debug!(%path, token, "conditional put lost to another writer; again");
                }
                Err(error) => return Err(FenceError::Store(Box::new(error))),
            }
        }
        Err(FenceError::Contended(self.max_attempts))
    }

    /// The object at `path` and the token it was written with (`None`: written without one),
    /// or `None` if there is no object.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] if the store failed; [`FenceError::Invalid`] for a token metadata
    /// that is not a number.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read only, nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn run() -> Result<(), locksmith_fence::FenceError> {
    /// # use std::sync::Arc;
    /// use locksmith_fence::objects::FencedObjects;
    /// use object_store::path::Path;
    /// # let objects = FencedObjects::new(Arc::new(object_store::memory::InMemory::new()));
    /// let path = Path::from("reports/daily.json");
    /// assert!(objects.get(&path).await?.is_none());
    /// objects.put(&path, 8, "report").await?;
    /// let (bytes, token) = objects.get(&path).await?.expect("written");
    /// assert_eq!((&bytes[..], token), (&b"report"[..], Some(8)));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn get(&self, path: &Path) -> Result<Option<(Bytes, Option<u64>)>, FenceError> {
        let result = match self.store.get_opts(path, GetOptions::default()).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(FenceError::Store(Box::new(error))),
        };
        let token = token_of(path, &result.attributes)?;
        let bytes = result
            .bytes()
            .await
            .map_err(|error| FenceError::Store(Box::new(error)))?;
        Ok(Some((bytes, token)))
    }

    /// The object's version and token, read without its content.
    async fn current(&self, path: &Path) -> Result<Option<Current>, FenceError> {
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.store.get_opts(path, head).await {
            Ok(result) => {
                let token = token_of(path, &result.attributes)?.unwrap_or(0);
                let meta = result.meta;
                let version = (meta.e_tag.is_some() || meta.version.is_some()).then_some(UpdateVersion {
                    e_tag: meta.e_tag,
                    version: meta.version,
                });
                Ok(Some(Current { version, token }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(FenceError::Store(Box::new(error))),
        }
    }
}

fn token_attributes(token: u64) -> Attributes {
    let mut attributes = Attributes::new();
    attributes.insert(
        Attribute::Metadata(TOKEN_METADATA.into()),
        AttributeValue::from(token.to_string()),
    );
    attributes
}

fn token_of(path: &Path, attributes: &Attributes) -> Result<Option<u64>, FenceError> {
    let Some(value) = attributes.get(&Attribute::Metadata(TOKEN_METADATA.into())) else {
        return Ok(None);
    };
    value
        .as_ref()
        .parse()
        .map(Some)
        .map_err(|_| FenceError::Invalid(format!("{path}: metadata {TOKEN_METADATA} = {value:?} is not a token")))
}
