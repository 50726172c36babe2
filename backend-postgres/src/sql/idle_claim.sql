-- Claims the schema's next automatic pass of pruning (idle.rs): the row '{pruned}' keeps in
-- holder_expires (no holder ever lives in that row) when the last such pass began, on the
-- server's clock. A locker whose look finds it $1 milliseconds old or more (or never set) sets it
-- to now and runs the pass; the others find it recent and look again later. So a schema is pruned
-- about every $1 ms however many lockers use it, and a process that lives milliseconds (a
-- `locksmith run`) runs the pass when it connects at a time one is due. Answers a row when
-- claimed. Concurrent claims queue on the row's lock: the second reads the first's new time and
-- claims nothing.
UPDATE {schema}.locks h
SET holder_expires = clock_timestamp()
WHERE h.segment = '{pruned}'
  AND (h.holder_expires IS NULL
       OR h.holder_expires <= clock_timestamp() - $1::bigint * interval '1 millisecond')
RETURNING 1
