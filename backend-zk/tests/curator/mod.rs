//! A participant that runs Apache Curator's own recipes in a JVM: `CuratorPeer.java` (next to this
//! file), compiled with `javac` against Debian's Curator jars (`libcurator-recipes-java`, which
//! brings the framework, the client and ZooKeeper's client jars; their manifests' `Class-Path`
//! names the rest) once per test binary, and driven line by line (see the Java file for the
//! commands). A peer is killed when dropped.
//!
//! Missing Java or Curator is a test failure with a clear message, never a skip:
//! `scripts/backends up` installs both.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Curator's recipes jar as Debian installs it; its manifest's `Class-Path` pulls in
/// curator-framework, curator-client, guava, slf4j-api and ZooKeeper's client.
const CURATOR_RECIPES: &str = "/usr/share/java/curator-recipes.jar";
/// slf4j's stderr logger (package libslf4j-java, a dependency of Curator and ZooKeeper).
const SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";
/// The peer's source.
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/curator/CuratorPeer.java");

/// How long a JVM may take to start and connect.
pub const STARTUP: Duration = Duration::from_secs(60);

/// The compiled peer (a class directory), built on first use.
fn classes() -> &'static Path {
    static CLASSES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match CLASSES.get_or_init(compile) {
        Ok(dir) => dir,
        Err(e) => panic!("{e}"),
    }
}

fn have(command: &str) -> bool {
    std::process::Command::new(command)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Compiles `CuratorPeer.java` into `$CARGO_TARGET_TMPDIR/curator-peer-<hash of the source>`.
fn compile() -> Result<PathBuf, String> {
    if !have("javac") || !have("java") {
        return Err(
            "javac/java not found: the Curator interop tests need a JDK (Debian package \
                    default-jdk-headless, which `scripts/backends up` installs)"
                .into(),
        );
    }
    if !Path::new(CURATOR_RECIPES).is_file() {
        return Err(format!(
            "{CURATOR_RECIPES} not found: the Curator interop tests need Apache Curator (Debian package \
             libcurator-recipes-java, which `scripts/backends up` installs)"
        ));
    }
    let source = std::fs::read(SOURCE).map_err(|e| format!("reading {SOURCE}: {e}"))?;
    let hash = source.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = root.join(format!("curator-peer-{hash:016x}"));
    if dir.join("CuratorPeer.class").is_file() {
        return Ok(dir);
    }
    // Compiled aside and renamed into place: test binaries running at once never see half a build.
    let scratch = root.join(format!("curator-peer-{hash:016x}.{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("creating {}: {e}", scratch.display()))?;
    let out = std::process::Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&scratch)
        .args(["-cp", CURATOR_RECIPES, SOURCE])
        .output()
        .map_err(|e| format!("running javac: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "javac {SOURCE} failed (is Debian's libcurator-recipes-java complete?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if std::fs::rename(&scratch, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&scratch); // another binary was first: use its build
    }
    Ok(dir)
}

/// `host:port,...` of `LOCKSMITH_TEST_ZK`, for Curator.
pub fn connect_string() -> String {
    let url = locksmith_core::driver::BackendUrl::parse(&crate::common::env_url("LOCKSMITH_TEST_ZK")).expect("URL");
    url.hosts.iter().map(|h| h.to_addr(2181)).collect::<Vec<_>>().join(",")
}

/// One running `CuratorPeer`.
pub struct Peer {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    log: PathBuf,
}

impl Peer {
    /// Starts `CuratorPeer <LOCKSMITH_TEST_ZK> <args>` (`["write", path]`, `["semaphore", path,
    /// "2"]`, `["latch", path, id]` ...) and waits until its session is connected.
    pub async fn start(args: &[&str]) -> Peer {
        let classes = classes();
        let what = format!("Curator {}", args.join(" "));
        static PEERS: AtomicU64 = AtomicU64::new(0);
        let log = std::env::temp_dir().join(format!(
            "locksmith-curator-peer-{}-{}.log",
            std::process::id(),
            PEERS.fetch_add(1, Ordering::Relaxed)
        ));
        let stderr = std::fs::File::create(&log).expect("the peer's log file");
        let mut classpath = format!("{}:{CURATOR_RECIPES}", classes.display());
        if Path::new(SLF4J_SIMPLE).is_file() {
            classpath.push_str(&format!(":{SLF4J_SIMPLE}"));
        }
        let mut child = Command::new("java")
            .args(["-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .args(["-cp", &classpath, "CuratorPeer", &connect_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("starting java");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().expect("the peer's stdout")).lines();
        let mut peer = Peer {
            what,
            child,
            stdin,
            lines,
            log,
        };
        peer.expect("ready", STARTUP).await;
        peer
    }

    /// Sends one command line.
    pub async fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("the peer's stdin is open");
        let written = async {
            stdin.write_all(format!("{command}\n").as_bytes()).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            panic!("{}: sending {command:?}: {e}{}", self.what, self.log_tail());
        }
    }

    /// The next line within `limit`, `None` if none came by then.
    pub async fn next_line(&mut self, limit: Duration) -> Option<String> {
        match tokio::time::timeout(limit, self.lines.next_line()).await {
            Err(_) => None,
            Ok(Ok(Some(line))) => Some(line),
            Ok(Ok(None)) => panic!("{}: exited early{}", self.what, self.log_tail()),
            Ok(Err(e)) => panic!("{}: reading its output: {e}{}", self.what, self.log_tail()),
        }
    }

    /// The next line, which must start with `word` (within `limit`); returns the rest of it.
    pub async fn expect(&mut self, word: &str, limit: Duration) -> String {
        match self.next_line(limit).await {
            Some(line) if line == word => String::new(),
            Some(line) if line.starts_with(&format!("{word} ")) => line[word.len() + 1..].to_owned(),
            Some(line) => panic!("{}: expected {word:?}, got {line:?}{}", self.what, self.log_tail()),
            None => panic!("{}: no {word:?} within {limit:?}{}", self.what, self.log_tail()),
        }
    }

    /// Closes its input (it releases what it holds and exits) and waits for it to exit.
    pub async fn close(mut self) {
        drop(self.stdin.take());
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            other => panic!("{}: did not exit cleanly: {other:?}{}", self.what, self.log_tail()),
        }
    }

    /// The end of the peer's stderr (Curator's and ZooKeeper's warnings), for failure messages.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("\n--- {} ({}) ---\n{}", self.what, self.log.display(), tail.join("\n"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.log);
    }
}
