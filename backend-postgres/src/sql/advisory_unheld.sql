SELECT h.n FROM unnest($1::int4[], $2::int8[]) WITH ORDINALITY AS h(pid, key, n)
WHERE NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
AND l.objsubid = 1 AND l.pid = h.pid AND l.classid::int8 = (h.key >> 32) & 4294967295
AND l.objid::int8 = h.key & 4294967295)
