-- item_fail_hard_timeout, from workqueue/sql/queries.sql (expanded)
WITH t AS (
    SELECT * FROM unnest(%(queues)s::text[], %(timeouts)s::float8[]) AS t(queue, timeout_s)
),
victims AS (
    SELECT v.id, t.timeout_s FROM t CROSS JOIN LATERAL (
        SELECT h.id FROM work_items h
        WHERE h.queue = t.queue AND h.state IN ('starting', 'active', 'stopping')
          AND h.started_at < coalesce(%(now)s, now()) - make_interval(secs => t.timeout_s)
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS v
)
UPDATE work_items w
SET state = 'stopped', outcome = 'failed', stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
    last_error = format('hard timeout: held longer than %%s s', v.timeout_s),
    attempt_log = (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
        || jsonb_build_array(jsonb_build_object(
               'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
               'outcome', 'timed out'::text, 'error', format('hard timeout: held longer than %%s s', v.timeout_s)::text))
FROM victims v
WHERE w.id = v.id
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at;
