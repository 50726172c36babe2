-- renew_many: extends every listed lease ($2 ids, $3 their locks' segments) of locker $1 that is
-- still live by its own TTL, in one statement (alone.sql's renew_leases: the holders kept in lock
-- rows, then the entries). Returns the ids renewed.
SELECT * FROM {schema}.renew_leases($1, $2, $3)
