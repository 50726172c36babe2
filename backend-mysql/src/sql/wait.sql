-- The wait connection's wait (wake.rs): unless this locker's mailbox has a row, it sleeps while
-- holding the named lock `locksmith_wait_<owner>` (its mark: `IS_USED_LOCK` of it tells a waker
-- which connection to send `KILL QUERY`, and that it is running this statement). The mark is
-- released at the end of the statement, or by `wait_unmark.sql` after an interrupted one.
SELECT IF(EXISTS(SELECT 1 FROM locksmith_wakes WHERE owner = ?), 0, GET_LOCK(?, 0) + SLEEP(?) + RELEASE_LOCK(?)) AS slept /* locksmith wait */
