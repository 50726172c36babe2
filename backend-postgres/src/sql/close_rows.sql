UPDATE {schema}.locks l SET holder = NULL
FROM unnest($2::text[], $3::text[]) AS kept(segment, id)
WHERE l.segment = kept.segment AND l.holder = kept.id AND l.holder_owner = $1
