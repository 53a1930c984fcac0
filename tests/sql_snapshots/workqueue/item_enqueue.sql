-- item_enqueue, from workqueue/sql/queries.sql (expanded)
INSERT INTO work_items AS w (
    public_id, queue, key, environment_id, state, priority, run_after, attempts, max_attempts,
    metadata, trace_context, wire, reclaimed, handed_out, created_at, group_key
)
SELECT work_mint_id('work_'), r.queue, r.key, r.environment_id, 'queued', r.priority, r.run_after, r.attempts,
       r.max_attempts, r.metadata, r.trace_context, r.wire, false, false, now(), r.group_key
FROM (
    SELECT %(queue)s::text AS queue, %(key)s::text AS key, e.id AS environment_id, %(priority)s::int AS priority,
           coalesce(%(run_after)s::timestamptz, now() + make_interval(secs => %(delay)s)) AS run_after,
           %(attempts)s::int AS attempts, %(max_attempts)s::int AS max_attempts, %(metadata)s::jsonb AS metadata,
           %(trace_context)s::jsonb AS trace_context,
           coalesce(e.kind = 'self_hosted' AND %(over_wire)s::bool, false) AS wire, %(group)s::text AS group_key
    FROM (SELECT 1) AS one
    LEFT JOIN work_environments e ON e.id = %(environment_id)s
    WHERE %(environment_id)s::text IS NULL OR e.id IS NOT NULL
) AS r
ON CONFLICT (queue, key) WHERE state IN ('queued', 'starting', 'active')
DO UPDATE SET priority = greatest(w.priority, excluded.priority),
              run_after = least(w.run_after, excluded.run_after)
RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
    w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
    w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
    w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at, (xmax = 0) AS created, pg_notify(%(channel)s, w.queue);
