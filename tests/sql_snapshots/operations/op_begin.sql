-- op_begin, from operations/sql/queries.sql (expanded)
WITH item AS (
    UPDATE work_items AS w SET lease_expires_at = now() + make_interval(secs => %(lease)s)
    WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
    RETURNING w.lease_expires_at
),
began AS (
    UPDATE operations AS o
    SET state = 'running', attempts = o.attempts + 1,
        claimed_until = item.lease_expires_at, lease_token = %(token)s,
        worker_id = %(worker_id)s::text, started_at = coalesce(o.started_at, now()),
        wait_kind = '', wait_name = '', wake_at = NULL,
        updated_at = now(), revision = o.revision + 1,
        attempt_log = (CASE WHEN jsonb_array_length(o.attempt_log) >= 20 THEN o.attempt_log - 0 ELSE o.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'number', o.attempts + 1, 'worker_id', %(worker_id)s::text, 'started_at', now()))
    FROM item
    WHERE o.id = %(id)s
      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until < now()))
      AND o.attempts < o.max_attempts AND NOT o.cancel_requested AND o.deps_open = 0
    RETURNING o.id, o.kind, o.owner, o.state, o.queue, o.priority, o.request, o.units_total, o.units_done,
        o.unit, o.message, o.count_label, o.count, o.result_uri, o.result_detail, o.error_code,
        o.error_message, o.error_retryable, o.attempts, o.max_attempts, o.cancel_requested, o.revision,
        o.claimed_until, o.lease_token, o.worker_id, o.created_at, o.updated_at, o.started_at,
        o.finished_at, o.parent_id, o.position, o.follows_id, o.fanned_in, o.children_total,
        o.children_succeeded, o.children_failed, o.children_cancelled, o.workflow, o.wait_kind,
        o.wait_name, o.wake_at, o.wake_pending, o.forked_from_id, o.deps_open, o.has_dependents
)
SELECT began.*, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = began.id AND watch.until > now()))
        AS notified, (SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit FROM began;
