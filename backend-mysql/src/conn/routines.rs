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

/// The server's refusals of a `CREATE PROCEDURE` for want of a right: `ER_DBACCESS_DENIED_ERROR`,
/// `ER_TABLEACCESS_DENIED_ERROR` (a command denied), `ER_SPECIFIC_ACCESS_DENIED_ERROR`,
/// `ER_PROCACCESS_DENIED_ERROR`, `ER_BINLOG_CREATE_ROUTINE_NEED_SUPER`. Any other refusal (a
/// syntax the server does not take, a read-only server) is not the user's missing grant, and the
/// warning says what it was instead of asking for one.
const PRIVILEGE_REFUSALS: [u16; 5] = [1044, 1142, 1227, 1370, 1419];

/// The warning of a locker that goes on without the procedures, for the server's `number`.
fn fallback_advice(number: u16) -> &'static str {
    if PRIVILEGE_REFUSALS.contains(&number) {
        "grant CREATE ROUTINE on the database"
    } else {
        "the server refused the definition itself (not a missing right): please report it with the \
         server's version"
    }
}

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
                let advice = server_number(&e).map(fallback_advice).unwrap_or_default();
                tracing::warn!(
                    procedure = name,
                    error = %e,
                    advice,
                    "mysql: could not create the stored procedures: each step is a transaction of \
                     several statements instead of one call"
                );
                return Ok(false);
            }
            Err(e) => return Err(mysql_error("creating the stored procedures", e)),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a, 64 bits: a digest that no compiler or crate version changes.
    fn digest(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// The definitions as released under each name. A database keeps the body it was given under
    /// a name, and lockers call it by name: a body changed under the same name would leave
    /// servers that installed the earlier one running it for every release that follows.
    const RELEASED: [(&str, u64); 2] = [
        ("locksmith_enter_v4", 0x277a98c00d9c3d40),
        ("locksmith_release_v5", 0xc8e5949f3915cb1c),
    ];

    #[test]
    fn a_changed_procedure_body_takes_a_new_name() {
        for ((name, create), (released, expected)) in sql::PROCEDURES.iter().zip(RELEASED) {
            let found = digest(create);
            assert!(
                *name == released && found == expected,
                "{name}'s definition is not the one released as {released} (digest {found:#x}, \
                 released {expected:#x}): a changed body needs a new name (the next _vN, in \
                 layout.rs and call_*.sql), then its digest here (a change of the comment before \
                 CREATE alone, which the server does not keep: the digest only)"
            );
        }
    }

    #[test]
    fn only_a_missing_right_asks_for_a_grant() {
        for number in PRIVILEGE_REFUSALS {
            assert!(fallback_advice(number).contains("CREATE ROUTINE"), "{number}");
        }
        // ER_PARSE_ERROR, ER_OPTION_PREVENTS_STATEMENT (read_only), ER_SP_BADSTATEMENT
        for number in [1064, 1290, 1314] {
            assert!(!fallback_advice(number).contains("grant"), "{number}");
            assert!(fallback_advice(number).contains("report"), "{number}");
        }
    }
}
