-- op_suspend, from operations/sql/queries.sql (expanded)
WITH held AS (
    SELECT w.id FROM work_items AS w
    WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
    FOR UPDATE
),
s AS (
    UPDATE operations AS o
    SET state = 'pending', attempts = greatest(o.attempts - 1, 0), claimed_until = NULL, lease_token = NULL,
        wait_kind = %(wait_kind)s::text, wait_name = %(wait_name)s::text,
        wake_at = CASE WHEN o.wake_pending AND %(wait_kind)s::text = 'signal' THEN now()
                       ELSE %(wake_at)s::timestamptz END,
        wake_pending = false,
        units_total = %(units_total)s::int, units_done = %(units_done)s::int, unit = %(unit)s::text,
        message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        updated_at = now(), revision = o.revision + 1,
        attempt_log = CASE WHEN jsonb_array_length(o.attempt_log) = 0 THEN o.attempt_log
                 ELSE jsonb_set(o.attempt_log, ARRAY[(jsonb_array_length(o.attempt_log) - 1)::text],
                                (o.attempt_log -> -1) || jsonb_build_object('finished_at', now()) || jsonb_build_object('outcome', 'waiting'))
            END
    FROM held
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running' AND NOT o.cancel_requested
    RETURNING o.id, o.wake_at
),
item AS (
    UPDATE work_items AS w
    SET state = 'queued', run_after = coalesce(s.wake_at, now() + interval '100 years'), lease_token = NULL,
        lease_expires_at = NULL, attempts = greatest(w.attempts - 1, 0), reclaimed = false
    FROM s
    WHERE w.id = %(item_id)s
    RETURNING w.id
)
SELECT s.id, s.wake_at, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = s.id AND watch.until > now()))
        AS notified FROM s;
