-- item_extend_many, from workqueue/sql/queries.sql (expanded)
WITH p AS (SELECT %(ids)b::bigint[] AS ids, %(tokens)b::uuid[] AS tokens, %(leases)b::float8[] AS leases),
held AS (
    SELECT w.id, w.lease_token FROM work_items w, p
    WHERE w.id = ANY (ARRAY(SELECT unnest(%(ids)b::bigint[]))) AND w.state NOT IN ('queued', 'stopped') AND w.state <> 'stopping'
      AND p.tokens[width_bucket(w.lease_token, p.tokens)] = w.lease_token AND p.ids[width_bucket(w.lease_token, p.tokens)] = w.id
),
mine AS (
    SELECT w.id FROM work_items w, p
    WHERE w.id = ANY (ARRAY(SELECT held.id FROM held)) AND w.state NOT IN ('queued', 'stopped') AND w.state <> 'stopping'
      AND p.tokens[width_bucket(w.lease_token, p.tokens)] = w.lease_token AND p.ids[width_bucket(w.lease_token, p.tokens)] = w.id
    FOR UPDATE OF w SKIP LOCKED
),
renewed AS (
    UPDATE work_items w
    SET lease_expires_at = now() + make_interval(secs => p.leases[width_bucket(w.lease_token, p.tokens)])
    FROM p
    WHERE w.id = ANY (ARRAY(SELECT mine.id FROM mine))
    RETURNING w.id, w.lease_token, w.lease_expires_at
)
SELECT held.id, held.lease_token, NULL::timestamptz AS lease_expires_at, true AS held, (SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit
FROM held
UNION ALL
SELECT renewed.id, renewed.lease_token, renewed.lease_expires_at, true, (SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit
FROM renewed;
