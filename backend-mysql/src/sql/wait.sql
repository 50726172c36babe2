-- The wait connection's statement (wake.rs): 0 at once when the locker's mailbox has a row; else a
-- wait in GET_LOCK on the name the locker's steps' connection holds, until the next beat (MySQL
-- takes whole seconds only: rounded up there), answered NULL when a KILL QUERY ends it. When the
-- name was free (the steps' connection is being opened again), it is given back at once and the
-- statement SLEEPs instead, which a KILL QUERY turns into an error.
SELECT IF(EXISTS(SELECT 1 FROM locksmith_wakes WHERE owner = ?), 0,
          IF(GET_LOCK(?, IF(VERSION() LIKE '%MariaDB%', ?, CEIL(?))) = 1, RELEASE_LOCK(?) + SLEEP(?), 0))
    AS woken /* locksmith wait */
