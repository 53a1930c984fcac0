-- item_extend_many, from workqueue/sql/queries.sql (expanded)
WITH t AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(leases)b::float8[]) AS t(id, token, lease_s)
),
mine AS (
    SELECT w.id, t.lease_s FROM work_items w JOIN t ON t.id = w.id
    WHERE w.id = ANY (ARRAY(SELECT id FROM t)) AND w.lease_token = t.token AND w.state IN ('starting', 'active')
    FOR UPDATE OF w SKIP LOCKED
),
renewed AS (
    UPDATE work_items w SET lease_expires_at = now() + make_interval(secs => mine.lease_s)
    FROM mine
    WHERE w.id = mine.id
    RETURNING w.id, w.lease_token, w.lease_expires_at
)
SELECT t.id, t.token, r.lease_expires_at,
       r.id IS NOT NULL OR EXISTS (
           SELECT 1 FROM work_items w
           WHERE w.id = t.id AND w.lease_token = t.token AND w.state IN ('starting', 'active')
       ) AS held,
       (SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit
FROM t LEFT JOIN renewed r ON r.id = t.id AND r.lease_token = t.token;
