-- wire_list_page, from workqueue/sql/wire.sql (expanded)
SELECT w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at
FROM work_items w
WHERE w.environment_id = %(environment_id)s AND w.wire
  AND (w.created_at, w.id) < (%(before_created)s::timestamptz, %(before_id)s::bigint)
ORDER BY w.created_at DESC, w.id DESC
LIMIT %(limit)s;
