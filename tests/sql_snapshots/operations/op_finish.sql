-- op_finish, from operations/sql/queries.sql (expanded)
WITH held AS (
    SELECT w.id FROM work_items AS w
    WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active', 'stopping')
    FOR UPDATE
),
f AS (
    UPDATE operations AS o
    SET state = CASE WHEN %(cancel_wins)s::bool AND o.cancel_requested THEN 'cancelled' ELSE %(state)s::text END,
        error_code = CASE WHEN %(cancel_wins)s::bool AND o.cancel_requested THEN 'cancelled'
                          ELSE %(error_code)s::text END,
        error_message = %(error_message)s::text,
        error_retryable = CASE WHEN %(error_code)s::text = '' THEN NULL ELSE %(error_retryable)s::bool END,
        result_uri = %(result_uri)s::text, result_detail = %(result_detail)s::jsonb,
        units_total = %(units_total)s::int,
        units_done = CASE WHEN %(all_done)s::bool AND %(units_total)s::int IS NOT NULL
                          THEN %(units_total)s::int ELSE %(units_done)s::int END,
        unit = %(unit)s::text, message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        finished_at = now(), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1,
        attempt_log = CASE WHEN jsonb_array_length(o.attempt_log) = 0 THEN o.attempt_log
                 ELSE jsonb_set(o.attempt_log, ARRAY[(jsonb_array_length(o.attempt_log) - 1)::text],
                                (o.attempt_log -> -1) || jsonb_build_object('finished_at', now()) || %(attempt)s::jsonb)
            END
    FROM held
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running'
    RETURNING o.id, o.kind, o.owner, o.state, o.queue, o.priority, o.request, o.units_total, o.units_done,
        o.unit, o.message, o.count_label, o.count, o.result_uri, o.result_detail, o.error_code,
        o.error_message, o.error_retryable, o.attempts, o.max_attempts, o.attempt_log,
        o.cancel_requested, o.revision, o.claimed_until, o.lease_token, o.worker_id, o.created_at,
        o.updated_at, o.started_at, o.finished_at, o.parent_id, o.position, o.follows_id, o.fanned_in,
        o.children_total, o.children_succeeded, o.children_failed, o.children_cancelled, o.workflow,
        o.wait_kind, o.wait_name, o.wake_at, o.wake_pending, o.forked_from_id, o.deps_open,
        o.has_dependents
),
item AS (
    UPDATE work_items AS w
    SET state = 'stopped', outcome = CASE f.state WHEN 'succeeded' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END, stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
        last_error = %(error_message)s::text,
        attempt_log = CASE WHEN CASE f.state WHEN 'succeeded' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END = 'succeeded' THEN w.attempt_log ELSE (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
                   'outcome', CASE f.state WHEN 'succeeded' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END::text, 'error', %(error_message)s::text::text)) END
    FROM f
    WHERE w.id = %(item_id)s
    RETURNING w.id
)
SELECT f.*, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = f.id AND watch.until > now()))
        AS notified FROM f;
