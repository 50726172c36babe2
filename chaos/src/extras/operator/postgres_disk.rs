//! PostgreSQL with its disk full: a schema's lock tables moved to a tablespace on a small tmpfs
//! (the superuser creates it: `LOCKSMITH_TEST_POSTGRES_ADMIN`), filled with lock rows until the
//! server cannot extend a file (SQLSTATE 53100). Root only, for the tmpfs; the tablespace is
//! dropped and the tmpfs unmounted afterwards, whatever happened.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::resources::{connect, name, not_run, row};
use super::{attempt, clear, held_through, OperatorFault};

/// Runs `sql` at `url` (one request); the server's message and SQLSTATE if it fails.
async fn run(url: &str, sql: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let task = tokio::spawn(connection);
    let done = client.batch_execute(sql).await.map_err(|e| match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    });
    drop(client);
    let _ = task.await;
    done
}

/// The tmpfs, its tablespace and the schema on it; dropped (by `psql`, as the superuser) and
/// unmounted on drop.
struct Space {
    dir: PathBuf,
    tablespace: String,
    schema: String,
    admin: String,
}

impl Drop for Space {
    fn drop(&mut self) {
        for sql in [
            format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
            format!("DROP TABLESPACE IF EXISTS {}", self.tablespace),
        ] {
            let _ = Command::new("psql")
                .args(["-X", "-q", "-d", &self.admin, "-c", &sql])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The uid:gid of the `postgres` user, who runs the test server when we are root.
fn postgres_ids() -> Option<(String, String)> {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    Some((id("-u")?, id("-g")?))
}

/// A 1 MiB tmpfs owned by the server's user and a tablespace on it; `None` where no tmpfs can be
/// mounted (not root).
async fn make_space(admin: &str, user: &str, schema: &str) -> Option<Result<Space, String>> {
    let (uid, gid) = postgres_ids()?;
    let tag = format!("{:08x}", rand::random::<u32>());
    let dir = std::env::temp_dir().join(format!("lockchaos-pg-full-{tag}"));
    std::fs::create_dir_all(&dir).ok()?;
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size=1m,mode=0700,uid={uid},gid={gid}"),
            "tmpfs",
        ])
        .arg(&dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    let space = Space {
        dir,
        tablespace: format!("chaos_small_{tag}"),
        schema: schema.to_owned(),
        admin: admin.to_owned(),
    };
    let made = async {
        let location = space.dir.display();
        run(
            admin,
            &format!("CREATE TABLESPACE {} LOCATION '{location}'", space.tablespace),
        )
        .await?;
        run(
            admin,
            &format!("GRANT CREATE ON TABLESPACE {} TO {user}", space.tablespace),
        )
        .await
    };
    Some(made.await.map(|()| space))
}

/// Moves every table and index of the schema to the tablespace, with a ballast table beside them
/// (dropped to free space again: a VACUUM would need space itself), then inserts unheld lock
/// rows until the server cannot extend the table, so that no page keeps room for a new row.
async fn fill(url: &str, space: &Space) -> Result<u64, String> {
    let (schema, tablespace) = (&space.schema, &space.tablespace);
    run(
        url,
        &format!(
            "DO $$ DECLARE r record; BEGIN
               FOR r IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'i') LOOP
                 EXECUTE format('ALTER %s %I.%I SET TABLESPACE {tablespace}',
                                CASE r.relkind WHEN 'r' THEN 'TABLE' ELSE 'INDEX' END, '{schema}', r.relname);
               END LOOP;
             END $$;
             CREATE TABLE {schema}.ballast TABLESPACE {tablespace} AS
             SELECT (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 30) i) AS b
             FROM generate_series(1, 100) g"
        ),
    )
    .await?;
    let mut next = 0u64;
    for batch in [1000u64, 100, 10, 1] {
        loop {
            let sql = format!(
                "INSERT INTO {schema}.locks (segment, token, queued)
                 SELECT 'filler/' || g, 0, false FROM generate_series({next}, {}) g",
                next + batch - 1
            );
            match run(url, &sql).await {
                Ok(()) => next += batch,
                Err(e) if e.contains("could not extend") => break,
                Err(e) => return Err(e),
            }
            if next > 1_000_000 {
                return Err(format!("a 1 MiB tablespace took {next} rows"));
            }
        }
    }
    Ok(next)
}

/// The case: `url` is the test user's server, `admin` the superuser's. `None` where no tmpfs
/// can be mounted (not root).
pub(super) async fn postgres_full_disk(url: &str, admin: &str) -> Option<OperatorFault> {
    let (backend, case) = ("postgres", "disk full (a tablespace on a 1 MiB tmpfs, SQLSTATE 53100)");
    let schema = format!("chaos_full_{:08x}", rand::random::<u32>());
    let sep = if url.contains('?') { '&' } else { '?' };
    let with = format!("{url}{sep}schema={schema}&ttl=1s");
    let user = url.split("://").nth(1)?.split(':').next()?.to_owned();
    let a = match connect(&with).await {
        Ok(a) => a,
        Err(e) => return Some(not_run(backend, case, e)),
    };
    let held_name = name("pg-full-held");
    let held = match a.lock(&held_name).acquire().await {
        Ok(g) => g,
        Err(e) => return Some(not_run(backend, case, format!("acquire: {e}"))),
    };
    let space = match make_space(admin, &user, &schema).await? {
        Ok(space) => space,
        Err(e) => return Some(not_run(backend, case, e)),
    };
    if let Err(e) = fill(url, &space).await {
        return Some(not_run(backend, case, format!("filling: {e}")));
    }
    let b = match connect(&with).await {
        Ok(b) => b,
        Err(e) => return Some(not_run(backend, case, e)),
    };
    let fresh = name("pg-full-new");
    let got = attempt(async move { b.lock(fresh).timeout(Duration::from_secs(3)).acquire().await.map(drop) }).await;
    let ok = clear(&got, &["disk is full", "could not extend"]) && got.ms < 6_000.0;
    let fate = held_through(&held, &a, &held_name, Duration::from_secs(3)).await;
    let _ = run(url, &format!("DROP TABLE {schema}.ballast")).await;
    let _ = held.release().await;
    let _ = a.shutdown().await;
    drop(space);
    Some(row(
        backend,
        case,
        "a clear error naming the full disk within the timeout; the held lock kept or its holder told",
        got,
        ok,
        fate,
    ))
}
