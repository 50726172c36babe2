-- The wait connection's mark (layout.rs, mark_prefix), held until the connection closes: no other
-- connection ever asks for this name, so it is taken at once.
DO GET_LOCK(CONCAT(?, CONNECTION_ID()), 0)
