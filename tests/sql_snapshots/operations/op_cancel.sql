-- op_cancel, from operations/sql/queries.sql (expanded)
WITH held AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM work_items AS w
        WHERE w.key = %(id)s AND w.state IN ('queued', 'starting', 'active', 'stopping') AND w.key <> ''
        FOR UPDATE) AS locked
),
c AS (
    UPDATE operations AS o
    SET cancel_requested = true,
        state = CASE WHEN o.state = 'pending' THEN 'cancelled' ELSE o.state END,
        error_code = CASE WHEN o.state = 'pending' THEN '' ELSE o.error_code END,
        error_message = CASE WHEN o.state = 'pending' THEN '' ELSE o.error_message END,
        error_retryable = CASE WHEN o.state = 'pending' THEN NULL ELSE o.error_retryable END,
        finished_at = CASE WHEN o.state = 'pending' THEN now() ELSE o.finished_at END,
        claimed_until = CASE WHEN o.state = 'pending' THEN NULL ELSE o.claimed_until END,
        updated_at = now(), revision = o.revision + 1
    FROM held
    WHERE o.id = %(id)s AND (%(owner)s::text IS NULL OR o.owner = %(owner)s::text)
      AND (o.state = 'pending' OR (o.state = 'running' AND NOT o.cancel_requested))
    RETURNING o.id, o.kind, o.owner, o.state, o.queue, o.priority, o.request, o.units_total, o.units_done,
        o.unit, o.message, o.count_label, o.count, o.result_uri, o.result_detail, o.error_code,
        o.error_message, o.error_retryable, o.attempts, o.max_attempts, o.attempt_log,
        o.cancel_requested, o.revision, o.claimed_until, o.lease_token, o.worker_id, o.created_at,
        o.updated_at, o.started_at, o.finished_at, o.parent_id, o.position, o.follows_id, o.fanned_in,
        o.children_total, o.children_succeeded, o.children_failed, o.children_cancelled, o.workflow,
        o.wait_kind, o.wait_name, o.wake_at, o.wake_pending, o.forked_from_id, o.deps_open,
        o.has_dependents
)
SELECT c.*, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = c.id AND watch.until > now()))
        AS notified FROM c;
