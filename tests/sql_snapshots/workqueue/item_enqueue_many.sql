-- item_enqueue_many, from workqueue/sql/queries.sql (expanded)
INSERT INTO work_items AS w (
    public_id, queue, key, environment_id, state, priority, run_after, attempts, max_attempts,
    metadata, trace_context, wire, reclaimed, handed_out, created_at, group_key
)
SELECT work_mint_id('work_'), r.queue, r.key, r.environment_id, 'queued', r.priority, r.run_after, r.attempts,
       r.max_attempts, r.metadata, r.trace_context, r.wire, false, false, now(), r.group_key
FROM (
    SELECT b.queue, b.key, b.environment_id, b.priority, now() + make_interval(secs => b.delay) AS run_after,
           0 AS attempts, b.max_attempts, b.metadata, %(trace_context)s::jsonb AS trace_context,
           coalesce(e.kind = 'self_hosted' AND b.over_wire, false) AS wire, b.group_key
    FROM (
        SELECT DISTINCT ON (u.queue, u.key) u.*
        FROM unnest(%(queues)s::text[], %(keys)s::text[], %(environment_ids)s::text[], %(priorities)s::int[],
                    %(delays)s::float8[], %(max_attempts)s::int[], %(metadatas)s::jsonb[], %(over_wires)s::bool[],
                    %(groups)s::text[])
             WITH ORDINALITY AS u(queue, key, environment_id, priority, delay, max_attempts, metadata, over_wire,
                                  group_key, ord)
        ORDER BY u.queue, u.key, u.priority DESC, u.ord
    ) AS b
    LEFT JOIN work_environments e ON e.id = b.environment_id
    ORDER BY b.ord
) AS r
ON CONFLICT (queue, key) WHERE state IN ('queued', 'starting', 'active')
DO UPDATE SET priority = greatest(w.priority, excluded.priority),
              run_after = least(w.run_after, excluded.run_after)
RETURNING w.id, w.public_id, w.queue, w.key, (xmax = 0) AS created;
