-- op_cancel_children, from operations/sql/queries.sql (expanded)
WITH kids AS (
    SELECT k.id, k.queue FROM operations AS k
    WHERE k.parent_id = %(id)s AND k.state IN ('pending', 'running')
),
held AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM work_items AS w
        WHERE w.key IN (SELECT kids.id FROM kids) AND w.state IN ('queued', 'starting', 'active', 'stopping') AND w.key <> ''
        FOR UPDATE) AS locked
),
c AS (
    UPDATE operations AS o
    SET cancel_requested = true,
        state = CASE WHEN o.state = 'pending' THEN 'cancelled' ELSE o.state END,
        error_code = CASE WHEN o.state = 'pending' THEN '' ELSE o.error_code END,
        error_message = CASE WHEN o.state = 'pending' THEN '' ELSE o.error_message END,
        error_retryable = CASE WHEN o.state = 'pending' THEN NULL ELSE o.error_retryable END,
        finished_at = CASE WHEN o.state = 'pending' THEN now() ELSE o.finished_at END,
        claimed_until = CASE WHEN o.state = 'pending' THEN NULL ELSE o.claimed_until END,
        updated_at = now(), revision = o.revision + 1
    FROM held, kids
    WHERE o.id = kids.id AND (o.state = 'pending' OR (o.state = 'running' AND NOT o.cancel_requested))
    RETURNING o.id, o.queue, o.state
),
stopped AS (
    UPDATE work_items AS w
    SET state = 'stopped', outcome = 'cancelled', stopped_at = now(),
        stop_requested_at = coalesce(w.stop_requested_at, now()), lease_token = NULL, lease_expires_at = NULL
    FROM (SELECT c.id FROM c WHERE c.state = 'cancelled') AS gone
    WHERE w.key = gone.id AND w.state IN ('queued', 'starting', 'active', 'stopping') AND w.key <> ''
    RETURNING w.id
)
SELECT c.id, c.state, (SELECT count(*) FROM stopped) AS items_stopped, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = c.id AND watch.until > now()))
        AS notified FROM c;
