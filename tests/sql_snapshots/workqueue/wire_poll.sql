-- wire_poll, from workqueue/sql/wire.sql (expanded)
WITH finalized AS (
    UPDATE work_items w
    SET state = 'stopped', outcome = coalesce(w.outcome, 'stopped'), stopped_at = now(),
        lease_token = NULL, lease_expires_at = NULL
    FROM (
        SELECT s.id FROM work_items s
        WHERE s.environment_id = %(environment_id)s AND s.wire AND s.state = 'stopping'
          AND (s.lease_expires_at IS NULL OR s.lease_expires_at < now())
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) AS f
    WHERE w.id = f.id
    RETURNING 'finalized'::text AS verdict, w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
        w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
        w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
        w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at
),
exhausted AS (
    UPDATE work_items w
    SET state = CASE WHEN (w.attempts >= w.max_attempts) THEN 'stopped' ELSE 'queued' END,
        outcome = CASE WHEN (w.attempts >= w.max_attempts) THEN 'failed' END,
        stopped_at = CASE WHEN (w.attempts >= w.max_attempts) THEN now() END,
        last_error = CASE WHEN (w.attempts >= w.max_attempts)
                          THEN format(
                                  'lease lapsed on attempt %%s of %%s (the holder died or stalled); attempts are spent, so it is not retried',
                                  w.attempts, w.max_attempts
                              )
                          ELSE w.last_error END,
        lease_token = NULL, lease_expires_at = NULL, reclaimed = true,
        attempt_log = (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
                   'outcome', 'lease lapsed'::text, 'error', NULL::text))
    FROM (
        SELECT s.id FROM work_items s
        WHERE s.environment_id = %(environment_id)s AND s.wire AND s.state IN ('starting', 'active')
          AND s.lease_expires_at < now() AND (s.attempts >= s.max_attempts)
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) AS x
    WHERE w.id = x.id
    RETURNING 'exhausted'::text AS verdict, w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
        w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
        w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
        w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at
),
ready AS (
    SELECT r.id, false AS lapsed, r.priority, r.run_after
    FROM work_items r
    WHERE r.environment_id = %(environment_id)s AND r.wire AND r.state = 'queued'
      AND r.run_after <= now() AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= now())
      AND r.queue <> ALL (%(full_queues)s::text[]) AND (r.group_key IS NULL OR (r.queue || chr(31) || r.group_key) <> ALL (%(blocked_groups)s::text[]))
          AND (r.queue = ANY (%(flow_queues)s::text[]) OR NOT EXISTS (
                  SELECT 1 FROM work_queue_controls fg
                  WHERE fg.queue = r.queue
                    AND (fg.paused OR fg.max_running IS NOT NULL OR fg.max_running_per_group IS NOT NULL
                         OR fg.rate_count IS NOT NULL OR fg.rate_per_group_count IS NOT NULL)
              ))
    ORDER BY r.priority DESC, r.run_after, r.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
lapsed AS (
    SELECT l.id, true AS lapsed, l.priority, l.run_after
    FROM work_items l
    WHERE l.environment_id = %(environment_id)s AND l.wire AND l.state IN ('starting', 'active')
      AND l.lease_expires_at < now() AND NOT (l.attempts >= l.max_attempts) AND l.run_after <= now()
      AND l.queue <> ALL (%(full_queues)s::text[]) AND (l.group_key IS NULL OR (l.queue || chr(31) || l.group_key) <> ALL (%(blocked_groups)s::text[]))
          AND (l.queue = ANY (%(flow_queues)s::text[]) OR NOT EXISTS (
                  SELECT 1 FROM work_queue_controls fg
                  WHERE fg.queue = l.queue
                    AND (fg.paused OR fg.max_running IS NOT NULL OR fg.max_running_per_group IS NOT NULL
                         OR fg.rate_count IS NOT NULL OR fg.rate_per_group_count IS NOT NULL)
              ))
    ORDER BY l.priority DESC, l.run_after, l.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
pick AS (
    SELECT * FROM ready
    UNION ALL
    SELECT * FROM lapsed
    ORDER BY priority DESC, run_after, id
    LIMIT 1
),
handed AS (
    UPDATE work_items w
    SET state = 'queued',
        public_id = CASE WHEN w.handed_out THEN work_mint_id('work_') ELSE w.public_id END,
        handed_out = true,
        lease_expires_at = now() + make_interval(secs => %(reserve_s)s),
        lease_token = NULL,
        acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL,
        reclaimed = w.reclaimed OR p.lapsed,
        claimed_by = %(worker_id)s
    FROM pick p
    WHERE w.id = p.id
    RETURNING 'handed'::text AS verdict, w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
        w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
        w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
        w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at
)
SELECT * FROM handed
UNION ALL
SELECT * FROM finalized
UNION ALL
SELECT * FROM exhausted;
