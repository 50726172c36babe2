WITH gone AS (DELETE FROM {schema}.entries WHERE owner = $1 RETURNING segment)
, o AS (DELETE FROM {schema}.owners WHERE id = $1)
SELECT DISTINCT segment FROM gone
