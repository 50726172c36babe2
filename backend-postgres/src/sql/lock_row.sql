SELECT {schema}.lock_row($1)
