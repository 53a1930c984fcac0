-- op_deps_settle, from operations/sql/queries.sql (expanded)
WITH open AS (
    SELECT e.id, a.state, a.error_code
    FROM operations_dependencies AS e JOIN operations AS a ON a.id = e.after_id
    WHERE a.id = ANY(%(ids)s::text[]) AND a.has_dependents AND a.state IN ('succeeded', 'failed', 'cancelled')
      AND NOT e.decided
    ORDER BY e.id
    FOR UPDATE OF e
),
edge AS (
    UPDATE operations_dependencies AS e SET decided = true
    FROM open
    WHERE e.id = open.id AND NOT e.decided
    RETURNING e.op_id, e.after_id, open.state, open.error_code
),
tally AS (
    SELECT e.op_id, count(*) FILTER (WHERE e.state = 'succeeded') AS ok,
           (array_agg(format('dependency %%s ended %%s%%s; it will not run: start it again once its dependencies can succeed',
                      e.after_id, e.state, CASE WHEN e.error_code <> '' THEN format(' (%%s)', e.error_code) ELSE '' END) ORDER BY e.after_id)
                FILTER (WHERE e.state <> 'succeeded'))[1] AS bad
    FROM edge AS e
    GROUP BY e.op_id
),
held AS (
    SELECT d.id FROM operations AS d
    WHERE d.id IN (SELECT tally.op_id FROM tally)
    ORDER BY d.created_at, d.id
    FOR UPDATE OF d
),
settled AS (
    UPDATE operations AS o
    SET deps_open = o.deps_open - t.ok,
        state = CASE WHEN t.bad IS NULL THEN o.state ELSE 'failed' END,
        error_code = CASE WHEN t.bad IS NULL THEN o.error_code ELSE 'dependency_failed' END,
        error_message = CASE WHEN t.bad IS NULL THEN o.error_message ELSE t.bad END,
        error_retryable = CASE WHEN t.bad IS NULL THEN o.error_retryable ELSE false END,
        finished_at = CASE WHEN t.bad IS NULL THEN o.finished_at ELSE now() END,
        updated_at = now(), revision = o.revision + 1
    FROM tally AS t, held AS h
    WHERE o.id = t.op_id AND h.id = o.id AND o.state = 'pending' AND o.deps_open > 0
    RETURNING o.id, o.state, o.deps_open, o.queue, o.priority, o.max_attempts
),
item AS (
    INSERT INTO work_items AS w (
        public_id, queue, key, environment_id, state, priority, run_after, attempts, max_attempts,
        metadata, trace_context, wire, reclaimed, handed_out, created_at, group_key
    )
    SELECT work_mint_id('work_'), r.queue, r.key, r.environment_id, 'queued', r.priority, r.run_after, r.attempts,
           r.max_attempts, r.metadata, r.trace_context, r.wire, false, false, now(), r.group_key
    FROM (
        SELECT s.queue, s.id AS key, NULL::text AS environment_id, s.priority, now() AS run_after,
               0 AS attempts, s.max_attempts, jsonb_build_object() AS metadata, NULL::jsonb AS trace_context,
               false AS wire, NULL::text AS group_key
        FROM settled AS s
        WHERE s.state = 'pending' AND s.deps_open = 0
    ) AS r
    ON CONFLICT (queue, key) WHERE state IN ('queued', 'starting', 'active') DO NOTHING
    RETURNING w.queue
),
woke AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT item.queue FROM item) AS q
)
SELECT s.id, s.state, s.deps_open, (SELECT count(*) FROM woke) AS woken, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = s.id AND watch.until > now()))
        AS notified
FROM settled AS s;
