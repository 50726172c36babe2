PREPARE {name} AS {sql};
SELECT parameter_types::oid[]::text FROM pg_prepared_statements WHERE name = '{name}';
DEALLOCATE {name}
