-- op_start_after, from operations/sql/queries.sql (expanded)
WITH locked AS (
    SELECT a.id FROM operations AS a
    WHERE a.id = ANY(%(after)s::text[])
    ORDER BY a.created_at, a.id
    FOR UPDATE OF a
),
dep AS (
    UPDATE operations AS a SET has_dependents = a.has_dependents OR a.state IN ('pending', 'running')
    FROM locked
    WHERE a.id = locked.id
    RETURNING a.id, a.state, a.error_code
),
v AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE dep.state <> 'succeeded') AS open,
           (array_agg(format('dependency %%s ended %%s%%s; it will not run: start it again once its dependencies can succeed',
                      dep.id, dep.state, CASE WHEN dep.error_code <> '' THEN format(' (%%s)', dep.error_code) ELSE '' END) ORDER BY dep.id)
                FILTER (WHERE dep.state IN ('failed', 'cancelled')))[1] AS bad
    FROM dep
),
ins AS (
    INSERT INTO operations AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              workflow, deps_open, error_code, error_message, error_retryable, finished_at,
                              created_at, updated_at)
    SELECT %(id)s, %(kind)s, %(owner)s, CASE WHEN v.bad IS NULL THEN 'pending' ELSE 'failed' END, %(queue)s,
           %(priority)s, %(request)s, %(count_label)s, %(max_attempts)s, %(workflow)s, v.open,
           CASE WHEN v.bad IS NULL THEN '' ELSE 'dependency_failed' END, coalesce(v.bad, ''),
           CASE WHEN v.bad IS NULL THEN NULL ELSE false END, CASE WHEN v.bad IS NULL THEN NULL ELSE now() END,
           now(), now()
    FROM v
    WHERE v.n = cardinality(%(after)s::text[])
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
edge AS (
    INSERT INTO operations_dependencies (op_id, after_id, decided)
    SELECT ins.id, dep.id, dep.state NOT IN ('pending', 'running') FROM ins, dep
    RETURNING after_id
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
               0 AS attempts, ins.max_attempts, jsonb_build_object() AS metadata,
               %(trace_context)s::jsonb AS trace_context, false AS wire, NULL::text AS group_key
        FROM ins
        WHERE ins.state = 'pending' AND ins.deps_open = 0
    ) AS r
    ON CONFLICT (queue, key) WHERE state IN ('queued', 'starting', 'active') DO NOTHING
    RETURNING pg_notify(%(queue_channel)s::text, w.queue)
)
SELECT ins.*, (SELECT count(*) FROM edge) AS edges FROM ins;
