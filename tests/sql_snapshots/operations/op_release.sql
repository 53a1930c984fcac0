-- op_release, from operations/sql/queries.sql (expanded)
WITH held AS (
    SELECT w.id FROM work_items AS w
    WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
    FOR UPDATE
),
r AS (
    UPDATE operations AS o
    SET state = 'pending', error_code = %(error_code)s::text, error_message = %(error_message)s::text,
        error_retryable = true, claimed_until = NULL, lease_token = NULL,
        units_total = %(units_total)s::int, units_done = %(units_done)s::int, unit = %(unit)s::text,
        message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        updated_at = now(), revision = o.revision + 1,
        attempt_log = CASE WHEN jsonb_array_length(o.attempt_log) = 0 THEN o.attempt_log
                 ELSE jsonb_set(o.attempt_log, ARRAY[(jsonb_array_length(o.attempt_log) - 1)::text],
                                (o.attempt_log -> -1) || jsonb_build_object('finished_at', now()) || %(attempt)s::jsonb)
            END
    FROM held
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running' AND NOT o.cancel_requested
    RETURNING o.id
),
item AS (
    UPDATE work_items AS w
    SET state = 'queued', run_after = now() + make_interval(secs => %(delay)s), lease_token = NULL,
        lease_expires_at = NULL, last_error = %(error_message)s::text, reclaimed = false,
        attempt_log = (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
                   'outcome', 'retried'::text, 'error', %(error_message)s::text::text))
    FROM r
    WHERE w.id = %(item_id)s
    RETURNING w.id
)
SELECT r.id, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = r.id AND watch.until > now()))
        AS notified FROM r;
