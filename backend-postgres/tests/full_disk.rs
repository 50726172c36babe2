//! PostgreSQL with its disk full: the lock tables of a schema moved to a tablespace on a small
//! tmpfs of the test's own, filled with rows until the server refuses to extend a file (SQLSTATE
//! 53100, "could not extend file …: No space left on device"). What must hold:
//!
//! - a new lock's acquire fails with an error that names the full disk (no hang, no panic), and
//!   within its timeout;
//! - a lock held before keeps renewing (its row has the room `fillfactor = 50` leaves for
//!   renewals) and is never granted to anyone else;
//! - once space is freed, the lock is handed over, its token higher.
//!
//! A tablespace needs the superuser (`LOCKSMITH_TEST_POSTGRES_ADMIN`), and the tmpfs root: where
//! no tmpfs can be mounted the test says so and checks nothing.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_as_owner, PgHarness};
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;

fn admin_url() -> String {
    std::env::var("LOCKSMITH_TEST_POSTGRES_ADMIN")
        .expect("LOCKSMITH_TEST_POSTGRES_ADMIN is not set: run `eval \"$(scripts/backends up single)\"` first")
}

/// Runs `sql` as the superuser.
async fn run_as_admin(sql: &str) -> Result<(), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls).await?;
    let task = tokio::spawn(connection);
    let done = client.batch_execute(sql).await;
    drop(client);
    let _ = task.await;
    done
}

/// The uid and gid of the `postgres` user, who runs the test server when we are root.
fn postgres_ids() -> Option<(String, String)> {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    Some((id("-u")?, id("-g")?))
}

/// A tmpfs of `size` owned by the server's user, and a tablespace on it. Dropped (with the schema
/// moved there, by `psql` as the superuser: a test that failed halfway must not leave a
/// tablespace on an unmounted directory) and unmounted on drop.
struct SmallTablespace {
    dir: std::path::PathBuf,
    name: String,
    /// The schema moved to it.
    schema: String,
}

impl SmallTablespace {
    async fn make(size: &str, schema: &str) -> Option<SmallTablespace> {
        let (uid, gid) = postgres_ids()?;
        let tag = format!("{:08x}", rand::random::<u32>());
        let dir = std::env::temp_dir().join(format!("locksmith-pg-full-{tag}"));
        std::fs::create_dir_all(&dir).expect("mount point");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700,uid={uid},gid={gid}"),
                "tmpfs",
            ])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            eprintln!("full_disk: cannot mount a tmpfs here (needs root): this test checks nothing on this machine");
            return None;
        }
        let space = SmallTablespace {
            name: format!("small_{tag}"),
            dir,
            schema: schema.to_owned(),
        };
        let name = &space.name;
        // (Two requests: CREATE TABLESPACE cannot run in the transaction of a batch.)
        run_as_admin(&format!("CREATE TABLESPACE {name} LOCATION '{}'", space.dir.display()))
            .await
            .expect("creating the tablespace as the superuser");
        run_as_admin(&format!("GRANT CREATE ON TABLESPACE {name} TO locksmith"))
            .await
            .expect("granting the tablespace");
        Some(space)
    }
}

impl Drop for SmallTablespace {
    fn drop(&mut self) {
        for sql in [
            format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
            format!("DROP TABLESPACE IF EXISTS {}", self.name),
        ] {
            let _ = Command::new("psql")
                .args(["-X", "-q", "-d", &admin_url(), "-c", &sql])
                .status();
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Moves every table and index of `schema` to `tablespace`.
async fn move_schema(schema: &str, tablespace: &str) {
    run_as_owner(&format!(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'i') LOOP
             EXECUTE format('ALTER %s %I.%I SET TABLESPACE {tablespace}',
                            CASE r.relkind WHEN 'r' THEN 'TABLE' ELSE 'INDEX' END, '{schema}', r.relname);
           END LOOP;
         END $$"
    ))
    .await;
}

/// Inserts unheld lock rows into `schema`'s table until the server cannot extend it: in batches,
/// then one row at a time, so that no page is left with room for a new row. Returns how many.
async fn fill_with_rows(schema: &str) -> u64 {
    let (client, connection) = tokio_postgres::connect(&common::server_url(), tokio_postgres::NoTls)
        .await
        .expect("connecting as the owner");
    let task = tokio::spawn(connection);
    let mut next = 0u64;
    for batch in [1000u64, 100, 10, 1] {
        loop {
            let sql = format!(
                "INSERT INTO {schema}.locks (segment, token, queued)
                 SELECT 'filler/' || g, 0, false FROM generate_series({next}, {}) g",
                next + batch - 1
            );
            match client.batch_execute(&sql).await {
                Ok(()) => next += batch,
                Err(e) => {
                    let code = e.as_db_error().map(|d| d.code().code().to_owned());
                    assert_eq!(code.as_deref(), Some("53100"), "filling failed otherwise: {e}");
                    break;
                }
            }
            assert!(next < 10_000_000, "a 1 MiB tablespace took {next} rows");
        }
    }
    drop(client);
    let _ = task.await;
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_a_new_lock_fails_clearly_and_a_held_one_keeps_renewing() {
    let harness = PgHarness::plain().await;
    let url = format!("{}&ttl=1s", harness.url);
    let connect = || async { locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap()).await };
    let holder = connect().await.expect("connect");
    let name = unique_name("full-disk");
    let held = holder.lock(&name).acquire().await.expect("acquire");
    let token = held.fencing_token();

    let Some(space) = SmallTablespace::make("1m", &harness.schema).await else {
        return;
    };
    let schema = &harness.schema;
    move_schema(schema, &space.name).await;
    // Ballast, dropped to free space (a VACUUM of the filled table would need space itself).
    run_as_owner(&format!(
        "CREATE TABLE {schema}.ballast TABLESPACE {} AS
         SELECT (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 30) i) AS b
         FROM generate_series(1, 100) g",
        space.name
    ))
    .await;
    let rows = fill_with_rows(&harness.schema).await;
    eprintln!("full_disk: {rows} rows filled the tablespace");

    // A new lock: refused with the full disk named, at once for a try, within its timeout for a
    // wait.
    let other = connect().await.expect("connect on a full disk (nothing is written)");
    let fresh = unique_name("full-disk-new");
    let e = other
        .lock(&fresh)
        .try_acquire()
        .await
        .expect_err("a new lock's row written on a full disk");
    assert!(e.to_string().contains("disk is full"), "{e}");
    let started = tokio::time::Instant::now();
    let e = other
        .lock(&fresh)
        .timeout(Duration::from_secs(2))
        .acquire()
        .await
        .expect_err("a new lock's row written on a full disk");
    assert!(e.to_string().contains("disk is full"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "failed only after {:?}",
        started.elapsed()
    );

    // The held lock renews through three TTLs, and a contender is refused it meanwhile.
    let contender = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.lock(&name).timeout(Duration::from_secs(3)).acquire().await })
    };
    tokio::select! {
        reason = held.lost() => panic!("a lock held on a full disk was lost: {reason:?}"),
        () = tokio::time::sleep(Duration::from_secs(3)) => {}
    }
    let got = contender.await.expect("task");
    assert!(got.is_err(), "a lock held on a full disk was granted to a contender");

    // Space freed: the lock is handed over, its token higher.
    run_as_owner(&format!("DROP TABLE {schema}.ballast")).await;
    let waiter = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.lock(&name).timeout(Duration::from_secs(10)).acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release once space is free");
    let next = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock once space is free");
    assert!(next.fencing_token() > token, "a token went backwards");
    next.release().await.expect("release");
    holder.shutdown().await.expect("shutdown");
    other.shutdown().await.expect("shutdown");
    let tablespace = space.name.clone();
    drop(space);
    let left = common::query_as_owner(&format!(
        "SELECT count(*) FROM pg_tablespace WHERE spcname = '{tablespace}'"
    ))
    .await;
    assert_eq!(left, ["0"], "the test's tablespace was left behind");
}
