-- op_signal, from operations/sql/queries.sql (expanded)
WITH target AS (
    SELECT o.id FROM operations AS o WHERE o.id = %(id)s AND o.workflow AND o.state IN ('pending', 'running')
),
held AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM work_items AS w
        WHERE w.key = %(id)s AND w.state IN ('queued', 'starting', 'active', 'stopping') AND w.key <> ''
        FOR UPDATE) AS locked
),
sig AS (
    INSERT INTO operations_signals AS g (op_id, name, payload, sent_at)
    SELECT target.id, %(name)s, %(payload)s::jsonb, now() FROM target
    RETURNING g.id, g.op_id
),
woke AS (
    UPDATE operations AS o
    SET wake_pending = o.wake_pending OR o.state = 'running', updated_at = now(), revision = o.revision + 1
    FROM sig, held
    WHERE o.id = sig.op_id AND o.state IN ('pending', 'running')
    RETURNING o.id, o.state, o.wait_kind, o.wait_name
),
due AS (
    UPDATE work_items AS w
    SET run_after = now()
    FROM (SELECT woke.id FROM woke WHERE woke.state = 'pending' AND woke.wait_kind = 'signal'
                   AND woke.wait_name = %(name)s::text) AS hit
    WHERE w.key = hit.id AND w.state = 'queued' AND w.run_after > now()
    RETURNING w.queue
),
told AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT due.queue FROM due) AS q
)
SELECT sig.id, (SELECT count(*) FROM due) AS woken, (SELECT count(*) FROM told) AS told, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = sig.op_id AND watch.until > now()))
        AS notified
FROM sig;
