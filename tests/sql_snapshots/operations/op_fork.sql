-- op_fork, from operations/sql/queries.sql (expanded)
WITH src AS (
    SELECT o.* FROM operations AS o WHERE o.id = %(source)s AND o.workflow
),
ins AS (
    INSERT INTO operations AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              workflow, forked_from_id, created_at, updated_at)
    SELECT %(id)s, src.kind, src.owner, 'pending', src.queue, src.priority, src.request, src.count_label,
           src.max_attempts, true, src.id, now(), now()
    FROM src
    ON CONFLICT (id) DO NOTHING
    RETURNING o.id, o.kind, o.owner, o.state, o.queue, o.priority, o.request, o.units_total, o.units_done,
        o.unit, o.message, o.count_label, o.count, o.result_uri, o.result_detail, o.error_code,
        o.error_message, o.error_retryable, o.attempts, o.max_attempts, o.attempt_log,
        o.cancel_requested, o.revision, o.claimed_until, o.lease_token, o.worker_id, o.created_at,
        o.updated_at, o.started_at, o.finished_at, o.parent_id, o.position, o.follows_id, o.fanned_in,
        o.children_total, o.children_succeeded, o.children_failed, o.children_cancelled, o.workflow,
        o.wait_kind, o.wait_name, o.wake_at, o.wake_pending, o.forked_from_id, o.deps_open,
        o.has_dependents
),
copied AS (
    INSERT INTO operations_steps AS s (op_id, position, name, kind, state, attempts, started_at, finished_at, wake_at,
                              result, error, copied)
    SELECT ins.id, s.position, s.name, s.kind, s.state, s.attempts, s.started_at, s.finished_at, s.wake_at,
           s.result, s.error, true
    FROM ins, operations_steps AS s
    WHERE s.op_id = %(source)s AND s.position < %(from_step)s
    RETURNING s.position
),
item AS (
    INSERT INTO work_items AS w (
        public_id, queue, key, environment_id, state, priority, run_after, attempts, max_attempts,
        metadata, trace_context, wire, reclaimed, handed_out, created_at, group_key
    )
    SELECT work_mint_id('work_'), r.queue, r.key, r.environment_id, 'queued', r.priority, r.run_after, r.attempts,
           r.max_attempts, r.metadata, r.trace_context, r.wire, false, false, now(), r.group_key
    FROM (
        SELECT ins.queue, ins.id AS key, NULL::text AS environment_id, ins.priority, now() AS run_after,
               0 AS attempts, ins.max_attempts, jsonb_build_object() AS metadata, NULL::jsonb AS trace_context,
               false AS wire, NULL::text AS group_key
        FROM ins
    ) AS r
    ON CONFLICT (queue, key) WHERE state IN ('queued', 'starting', 'active') DO NOTHING
    RETURNING pg_notify(%(queue_channel)s::text, w.queue)
)
SELECT ins.*, (SELECT count(*) FROM copied) AS copied, (SELECT count(*) FROM item) AS enqueued FROM ins;
