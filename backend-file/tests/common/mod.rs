//! The harness of the file backend: every harness a new lock directory of its own, every locker
//! a new `connect` to it (as a separate process would).

use std::path::PathBuf;
use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, BackendUrl, LockName};
use locksmith_core::{Family, Locker};
use locksmith_file::FileBackend;

/// A lock directory of its own under the temporary directory.
pub struct FileHarness {
    pub dir: PathBuf,
    /// A backend of the harness's own, to read and remove state files with.
    pub look: FileBackend,
}

impl FileHarness {
    pub fn new() -> FileHarness {
        let dir = std::env::temp_dir().join(format!("locksmith-file-test-{:016x}", rand::random::<u64>()));
        let look = FileBackend::connect(&BackendUrl::parse(&format!("file://{}", dir.display())).unwrap()).unwrap();
        FileHarness { dir, look }
    }

    /// The URL of the harness's directory.
    pub fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }
}

impl Drop for FileHarness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[async_trait]
impl Harness for FileHarness {
    async fn locker(&self) -> Locker {
        locksmith_file::connect(&BackendUrl::parse(&self.url()).unwrap())
            .await
            .unwrap()
    }

    async fn delete_behind_back(&self, name: &LockName) {
        std::fs::remove_file(self.look.state_path(Family::Mutex, name)).expect("no state file to remove");
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        std::fs::remove_file(self.look.state_path(family, name)).expect("no state file to remove");
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        self.residue_in(Family::Mutex, name).await
    }

    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        self.look.entries(family, name).expect("reading the state file")
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}
