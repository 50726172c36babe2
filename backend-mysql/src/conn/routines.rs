//! The stored procedures of the one-call steps (`sql/proc_enter.sql`, `sql/proc_release.sql`,
//! used by `protocol/call.rs`), created beside the tables when a locker connects and missing.
//!
//! Their version is in their names (`locksmith_enter_v4`): a changed definition takes a new name,
//! so lockers of two releases never call each other's; an older version is left in place for the
//! lockers still running it (`DROP PROCEDURE` it by hand once they are gone). A `CALL` is prepared
//! once per connection and kept in sqlx's statement cache, like every statement. Creating them needs the `CREATE ROUTINE`
//! privilege on the database (calling them, `EXECUTE`, which their creator gets); a user without
//! it still works, each step then a transaction of several statements (`protocol/queue.rs`), and
//! a warning says so once per locker.

use sqlx::{MySqlConnection, Row};

use crate::error::{mysql_error, server_number};
use crate::layout::sql;

/// `ER_SP_ALREADY_EXISTS`: another locker created it meanwhile.
const ALREADY_EXISTS: u16 = 1304;

/// Makes the procedures that are missing; whether they can be called.
///
/// # Errors
///
/// The connection's errors other than a refused privilege (which answers `false`).
pub(crate) async fn install(c: &mut MySqlConnection) -> locksmith_core::Result<bool> {
    let present: Vec<String> = sqlx::query(sql::ROUTINES)
        .fetch_all(&mut *c)
        .await
        .map_err(|e| mysql_error("reading the stored procedures", e))?
        .iter()
        .filter_map(|r| r.try_get::<String, _>(0).ok())
        .collect();
    for (name, create) in sql::PROCEDURES {
        if present.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            continue;
        }
        match sqlx::Executor::execute(&mut *c, create).await {
            Ok(_) => tracing::debug!(procedure = name, "mysql: created a stored procedure"),
            Err(e) if server_number(&e) == Some(ALREADY_EXISTS) => {}
            Err(e) if server_number(&e).is_some() => {
                tracing::warn!(
                    procedure = name,
                    error = %e,
                    "mysql: could not create the stored procedures (grant CREATE ROUTINE on the database): \
                     each step is a transaction of several statements instead of one call"
                );
                return Ok(false);
            }
            Err(e) => return Err(mysql_error("creating the stored procedures", e)),
        }
    }
    Ok(true)
}
