-- op_flush, from operations/sql/queries.sql (expanded)
WITH item AS (
    UPDATE work_items AS w SET lease_expires_at = now() + make_interval(secs => %(lease)s)
    WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
    RETURNING w.lease_expires_at
),
f AS (
    UPDATE operations AS o
    SET units_total = %(units_total)s::int, units_done = %(units_done)s::int, unit = %(unit)s::text,
        message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        claimed_until = item.lease_expires_at, updated_at = now(), revision = o.revision + 1
    FROM item
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running'
    RETURNING o.id, o.revision, o.cancel_requested
)
SELECT f.revision, f.cancel_requested, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = f.id AND watch.until > now()))
        AS notified, (SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit FROM f;
