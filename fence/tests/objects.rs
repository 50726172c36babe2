//! Fenced objects against memory (`object_store::memory::InMemory`) and a real S3-compatible
//! server (moto, started by `scripts/backends` as `s3`: `LOCKSMITH_TEST_S3`).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use locksmith_fence::objects::FencedObjects;
use locksmith_fence::FenceError;
use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions,
    PutPayload, PutResult,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn unique_path(what: &str) -> Path {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    Path::from(format!("fence-tests/{what}-{nanos}"))
}

/// The S3 store of `LOCKSMITH_TEST_S3`, in a bucket made for this test.
async fn s3() -> Arc<dyn ObjectStore> {
    let endpoint = std::env::var("LOCKSMITH_TEST_S3")
        .expect("LOCKSMITH_TEST_S3 is not set: run `eval \"$(scripts/backends up)\"` first");
    let bucket = format!("fence-{}", std::process::id());
    create_bucket(&endpoint, &bucket).await;
    let store = AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_bucket_name(&bucket)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .expect("an S3 client");
    Arc::new(store)
}

/// `PUT /bucket` (moto takes it unsigned; an existing bucket answers as well).
async fn create_bucket(endpoint: &str, bucket: &str) {
    let address = endpoint.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.expect("the S3 server");
    let request =
        format!("PUT /{bucket} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.expect("answer");
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.contains("BucketAlreadyOwnedByYou"),
        "create bucket: {answer}"
    );
}

async fn content(objects: &FencedObjects, path: &Path) -> (Vec<u8>, Option<u64>) {
    let (bytes, token) = objects.get(path).await.expect("get").expect("an object");
    (bytes.to_vec(), token)
}

/// Tokens at or above the highest written are admitted; lower ones are refused with both
/// tokens named and change nothing; an object written around the fence counts as token 0.
async fn lower_tokens_are_refused(store: Arc<dyn ObjectStore>) {
    let objects = FencedObjects::new(store.clone());
    let path = unique_path("refused");
    assert!(objects.get(&path).await.expect("get").is_none());
    objects.put(&path, 5, "five").await.expect("a new object");
    assert_eq!(content(&objects, &path).await, (b"five".to_vec(), Some(5)));
    objects.put(&path, 5, "five again").await.expect("the same token again");
    let stale = objects.put(&path, 4, "four").await;
    assert!(
        matches!(stale, Err(FenceError::Stale { token: 4, highest: 5 })),
        "{stale:?}"
    );
    assert_eq!(content(&objects, &path).await, (b"five again".to_vec(), Some(5)));
    objects.put(&path, 9, "nine").await.expect("a higher token");
    assert_eq!(content(&objects, &path).await, (b"nine".to_vec(), Some(9)));

    let plain = unique_path("plain");
    store
        .put(&plain, PutPayload::from("unfenced"))
        .await
        .expect("a plain put");
    assert_eq!(content(&objects, &plain).await, (b"unfenced".to_vec(), None));
    objects.put(&plain, 1, "fenced").await.expect("token 1 over no token");
    assert_eq!(content(&objects, &plain).await, (b"fenced".to_vec(), Some(1)));
}

/// A store whose first conditional put is preceded by a later holder's write (token 100):
/// the write between a writer's read and its put, which only the condition catches.
#[derive(Debug)]
struct LaterHolderGetsIn {
    inner: Arc<dyn ObjectStore>,
    done: AtomicBool,
}

impl fmt::Display for LaterHolderGetsIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LaterHolderGetsIn({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LaterHolderGetsIn {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if !self.done.swap(true, Ordering::SeqCst) {
            FencedObjects::new(self.inner.clone())
                .put(location, 100, "the later holder")
                .await
                .expect("the later holder's write");
        }
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        self.inner.delete(location).await
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy(from, to).await
    }
    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

/// A later holder writes between an earlier holder's read and its put, on an existing object
/// and on a new one: the earlier put's condition fails, it reads again and is refused.
async fn a_write_between_read_and_put_is_caught(store: Arc<dyn ObjectStore>) {
    for existing in [true, false] {
        let path = unique_path(if existing { "between" } else { "between-new" });
        if existing {
            FencedObjects::new(store.clone())
                .put(&path, 3, "three")
                .await
                .expect("the first object");
        }
        let racing = Arc::new(LaterHolderGetsIn {
            inner: store.clone(),
            done: AtomicBool::new(false),
        });
        let stale = FencedObjects::new(racing).put(&path, 7, "seven").await;
        assert!(
            matches!(stale, Err(FenceError::Stale { token: 7, highest: 100 })),
            "existing {existing}: {stale:?}"
        );
        let objects = FencedObjects::new(store.clone());
        assert_eq!(
            content(&objects, &path).await,
            (b"the later holder".to_vec(), Some(100)),
            "existing {existing}"
        );
    }
}

#[tokio::test]
async fn memory_refuses_lower_tokens() {
    lower_tokens_are_refused(Arc::new(InMemory::new())).await;
}

#[tokio::test]
async fn memory_catches_a_write_between_read_and_put() {
    a_write_between_read_and_put_is_caught(Arc::new(InMemory::new())).await;
}

#[tokio::test]
async fn s3_refuses_lower_tokens() {
    lower_tokens_are_refused(s3().await).await;
}

#[tokio::test]
async fn s3_catches_a_write_between_read_and_put() {
    a_write_between_read_and_put_is_caught(s3().await).await;
}

/// Writers with tokens 1..=12 in a scrambled order, all at once, on memory: whatever order they
/// land in, the object ends with the highest token's content, and every refusal names a higher
/// token than the refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_end_with_the_highest_token() {
    let objects = FencedObjects::new(Arc::new(InMemory::new()));
    let path = unique_path("concurrent");
    let tokens = [7u64, 2, 12, 5, 1, 9, 11, 3, 8, 10, 4, 6];
    let writers: Vec<_> = tokens
        .iter()
        .map(|&token| {
            let (objects, path) = (objects.clone(), path.clone());
            tokio::spawn(async move { (token, objects.put(&path, token, token.to_string()).await) })
        })
        .collect();
    for writer in writers {
        match writer.await.expect("a writer") {
            (_, Ok(_)) => {}
            (
                token,
                Err(FenceError::Stale {
                    token: refused,
                    highest,
                }),
            ) => {
                assert_eq!(refused, token);
                assert!(highest > token, "{token} refused by {highest}");
            }
            (token, Err(other)) => panic!("writer {token}: {other}"),
        }
    }
    assert_eq!(content(&objects, &path).await, (b"12".to_vec(), Some(12)));
}

/// An object whose token metadata is not a number is not overwritten: the error names it.
#[tokio::test]
async fn a_token_that_is_not_a_number_is_an_error() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let path = unique_path("garbled");
    let mut attributes = object_store::Attributes::new();
    attributes.insert(
        object_store::Attribute::Metadata(locksmith_fence::objects::TOKEN_METADATA.into()),
        "seven".into(),
    );
    let options = PutOptions {
        attributes,
        ..PutOptions::default()
    };
    store
        .put_opts(&path, PutPayload::from("garbled"), options)
        .await
        .expect("a plain put");
    let result = FencedObjects::new(store.clone()).put(&path, 1, "x").await;
    match result {
        Err(FenceError::Invalid(message)) => assert!(message.contains("seven"), "{message}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    let bytes = store.get(&path).await.expect("get").bytes().await.expect("bytes");
    assert_eq!(&bytes[..], b"garbled");
}
