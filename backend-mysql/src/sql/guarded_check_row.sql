-- A guarded write's holder, kept in its lock's row: the row locked (by its unique key), so that
-- neither its release nor a step moving it into the queue runs before the write commits. Checked
-- before the queue (guarded_check.sql): a holder not in the row now was moved by a step that
-- committed first.
SELECT 1 FROM locksmith_locks WHERE segment = ? AND holder = ? AND token = ? AND holder_expires >= NOW(6) FOR UPDATE
