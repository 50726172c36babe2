-- The locker's mailbox, with what each named entry is now: held (granted by the step that wrote
-- the row: sql/proc_release.sql, protocol/queue.rs), its token, and the time left on its lease
-- in µs.
SELECT w.seq, w.entry, l.segment, e.held, e.token, TIMESTAMPDIFF(MICROSECOND, NOW(6), e.expires_at) AS left_us
FROM locksmith_wakes w JOIN locksmith_locks l ON l.lock_id = w.lock_id
LEFT JOIN locksmith_entries e ON e.id = w.entry
WHERE w.owner = ? ORDER BY w.seq
