-- op_fan_in, from operations/sql/queries.sql (expanded)
WITH done AS (
    UPDATE operations AS c SET fanned_in = true
    WHERE c.id = ANY(%(ids)s::text[]) AND c.parent_id IS NOT NULL AND NOT c.fanned_in
      AND c.state IN ('succeeded', 'failed', 'cancelled')
    RETURNING c.id, c.parent_id, c.kind, c.state, c.position, c.count, c.error_code, c.error_message,
              c.finished_at, c.result_uri, c.result_detail
),
tally AS (
    SELECT d.parent_id,
           count(*) FILTER (WHERE d.state = 'succeeded') AS ok,
           count(*) FILTER (WHERE d.state = 'failed') AS bad,
           count(*) FILTER (WHERE d.state = 'cancelled') AS off,
           coalesce(sum(d.count), 0) AS n,
           max(d.position) AS pos,
           (array_agg(d.error_code ORDER BY d.finished_at, d.position) FILTER (WHERE d.state = 'failed'))[1] AS fail_code,
           (array_agg(format('%%s (%%s, #%%s): %%s', d.id, d.kind, d.position + 1, d.error_message)
                      ORDER BY d.finished_at, d.position) FILTER (WHERE d.state = 'failed'))[1] AS fail_message,
           (array_agg(d.result_uri ORDER BY d.position DESC))[1] AS result_uri,
           (array_agg(d.result_detail ORDER BY d.position DESC))[1] AS result_detail
    FROM done AS d
    GROUP BY d.parent_id
),
settled AS (
    UPDATE operations AS o
    SET (children_succeeded, children_failed, children_cancelled, units_done, count, state,
         error_code, error_message, error_retryable, result_uri, result_detail, finished_at,
         updated_at, revision) = (
        SELECT v.ok, v.bad, v.off, v.ok + v.bad + v.off, o.count + t.n, v.state,
               CASE WHEN v.state = 'failed' AND o.kind = 'operations.batch' THEN 'children_failed'
                    WHEN v.state IN ('failed', 'running') THEN v.fcode ELSE '' END,
               CASE WHEN v.state = 'failed' AND o.kind = 'operations.batch'
                    THEN left(format('%%s of %%s children failed; the first: %%s [%%s]',
                                     v.bad, o.children_total, v.fmessage, v.fcode), 1024)
                    WHEN v.state = 'failed' THEN left(format('a step failed: %%s', v.fmessage), 1024)
                    WHEN v.state = 'running' THEN v.fmessage ELSE '' END,
               CASE WHEN v.state = 'failed' THEN false END,
               CASE WHEN v.state = 'succeeded' AND o.kind = 'operations.chain' THEN coalesce(t.result_uri, '')
                    ELSE o.result_uri END,
               CASE WHEN v.state <> 'succeeded' THEN o.result_detail
                    WHEN o.kind = 'operations.chain' THEN t.result_detail
                    ELSE jsonb_build_object('children', o.children_total, 'succeeded', v.ok) END,
               CASE WHEN v.state = 'running' THEN NULL ELSE now() END,
               now(), o.revision + 1
        FROM (
            SELECT u.*,
                   CASE WHEN NOT (u.ok + u.bad + u.off >= o.children_total
                                  OR (o.kind = 'operations.chain' AND (t.bad > 0 OR t.off > 0 OR o.cancel_requested)))
                        THEN o.state
                        WHEN o.cancel_requested THEN 'cancelled'
                        WHEN u.bad > 0 THEN 'failed'
                        WHEN u.off > 0 THEN 'cancelled'
                        ELSE 'succeeded' END AS state
            FROM (
                SELECT o.children_succeeded + t.ok AS ok, o.children_failed + t.bad AS bad,
                       o.children_cancelled + t.off AS off,
                       coalesce(nullif(o.error_code, ''), t.fail_code, '') AS fcode,
                       CASE WHEN o.error_code <> '' THEN o.error_message ELSE coalesce(t.fail_message, '') END AS fmessage
            ) AS u
        ) AS v
    )
    FROM tally AS t
    WHERE o.id = t.parent_id AND o.state IN ('pending', 'running')
    RETURNING o.id, o.kind, o.state, o.owner, o.request, t.pos
),
next AS (
    SELECT s.request -> 'steps' -> (s.pos + 1) AS spec, s.id AS parent_id, s.pos + 1 AS position,
           NULL::text AS follows_id, s.owner
    FROM settled AS s
    WHERE s.kind = 'operations.chain' AND s.state = 'running' AND s.request -> 'steps' -> (s.pos + 1) IS NOT NULL
    UNION ALL
    SELECT s.request -> 'then', NULL, NULL, s.id, s.owner
    FROM settled AS s
    WHERE s.state NOT IN ('pending', 'running') AND jsonb_typeof(s.request -> 'then') = 'object'
      AND (s.request -> 'then' -> 'on') ? s.state
),
started AS (
    INSERT INTO operations AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              parent_id, position, follows_id, created_at, updated_at)
    SELECT x.spec ->> 'id', x.spec ->> 'kind', x.owner, 'pending', x.spec ->> 'queue', (x.spec ->> 'priority')::int,
           x.spec -> 'request', x.spec ->> 'count_label', (x.spec ->> 'max_attempts')::int,
           x.parent_id, x.position, x.follows_id, now(), now()
    FROM next AS x
    ON CONFLICT (id) DO NOTHING
    RETURNING o.id, o.queue, o.priority, o.max_attempts
),
item AS (
    INSERT INTO work_items AS w (
        public_id, queue, key, environment_id, state, priority, run_after, attempts, max_attempts,
        metadata, trace_context, wire, reclaimed, handed_out, created_at, group_key
    )
    SELECT work_mint_id('work_'), r.queue, r.key, r.environment_id, 'queued', r.priority, r.run_after, r.attempts,
           r.max_attempts, r.metadata, r.trace_context, r.wire, false, false, now(), r.group_key
    FROM (
        SELECT started.queue, started.id AS key, NULL::text AS environment_id, started.priority,
               now() AS run_after, 0 AS attempts, started.max_attempts, jsonb_build_object() AS metadata,
               NULL::jsonb AS trace_context, false AS wire, x.spec ->> 'group' AS group_key
        FROM started JOIN next AS x ON x.spec ->> 'id' = started.id
    ) AS r
    ON CONFLICT (queue, key) WHERE state IN ('queued', 'starting', 'active') DO NOTHING
    RETURNING w.queue
),
woke AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT item.queue FROM item) AS q
)
SELECT s.id, s.state, (SELECT array_agg(started.id) FROM started) AS started,
       (SELECT count(*) FROM woke) AS woken, (SELECT pg_notify(%(channel)s::text, '')
            WHERE %(channel)s::text <> ''
              AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = s.id AND watch.until > now()))
               AS notified
FROM settled AS s;
