WITH freed AS (UPDATE {schema}.locks SET holder = NULL
WHERE segment = $1 AND holder = $2 AND holder_expires > clock_timestamp() RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT 1 FROM freed) THEN true
ELSE {schema}.leave_exclusive($1, $2, $3) END
