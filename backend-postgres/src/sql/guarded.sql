WITH in_entries AS (SELECT 1 FROM {schema}.entries
WHERE id = $1 AND token = $2::bigint AND expires_at > clock_timestamp() FOR SHARE),
in_row AS (SELECT 1 FROM {schema}.locks WHERE segment = $3 AND holder = $1
AND token = $2::bigint AND holder_expires > clock_timestamp() FOR SHARE),
held AS (SELECT 1 FROM in_entries UNION ALL SELECT 1 FROM in_row),
w AS ({write}) SELECT EXISTS (SELECT 1 FROM held), EXISTS (SELECT 1 FROM w)
