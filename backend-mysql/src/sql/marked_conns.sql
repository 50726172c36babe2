-- Whether each wait connection holds its mark (layout.rs, mark_prefix): one column a pair of the
-- mark's name and the registered connection id, 1 when that connection holds that name. A named
-- lock lookup, in place of a read of the process list (some 0.5-2 ms of the server's time).
SELECT {marks}
