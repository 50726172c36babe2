//! `locksmith init [--sql [--grant ROLE]]`: prepare the backend for lockers, or print the SQL
//! that does it.

use serde_json::json;

use crate::args::InitArgs;
use crate::exit::{Failure, USAGE};
use crate::session::Session;

/// Without `--sql`: connects as a locker does (on PostgreSQL that creates the schema and its
/// tables when they are missing, and checks their version), then prints `ready`, the backend and
/// the URL (without its password). With `--sql`: prints the SQL of a `postgres://` URL's schema
/// and, with `--grant ROLE`, the grants of a locker's user, without connecting.
pub async fn init(session: &Session, args: &InitArgs) -> Result<u8, Failure> {
    session.reject_ttl("init")?;
    // As URLs are read: the scheme in any case.
    let scheme = session
        .url
        .split_once("://")
        .map_or("", |(scheme, _)| scheme)
        .to_ascii_lowercase();
    let scheme = scheme.as_str();
    if args.sql {
        return print_sql(session, scheme, args.grant.as_deref());
    }
    let locker = session.connect().await?;
    // One request that reads the backend: the connection is not only open, it answers.
    session.within_timeout(locker.list("")).await?;
    let backend = locksmith::backend_for(scheme).map_or(scheme, |d| d.name);
    let url = session.shown_url();
    session.out.result(
        format!("ready\t{backend}\t{url}"),
        json!({"ready": true, "backend": backend, "url": url}),
    );
    Ok(0)
}

/// The SQL of `init --sql`, on stdout.
fn print_sql(session: &Session, scheme: &str, grant: Option<&str>) -> Result<u8, Failure> {
    if matches!(scheme, "mysql" | "mariadb") {
        return Err(Failure::new(
            USAGE,
            format!(
                "init --sql is for postgres:// URLs; on {scheme}:// `locksmith init` (without --sql) creates the tables and stored procedures, as a user with CREATE and CREATE ROUTINE"
            ),
        ));
    }
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(Failure::new(
            USAGE,
            format!(
                "init --sql is for postgres:// URLs; {scheme}:// needs no set-up (`locksmith init` checks that it answers)"
            ),
        ));
    }
    #[cfg(feature = "postgres")]
    {
        let sql = locksmith::postgres_setup_sql(&session.url, grant)?;
        session.out.result(sql.trim_end(), json!({"sql": sql}));
        Ok(0)
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (session, grant);
        Err(Failure::new(
            USAGE,
            "this locksmith was built without the postgres feature",
        ))
    }
}
