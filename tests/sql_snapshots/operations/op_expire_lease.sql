-- op_expire_lease, from operations/sql/queries.sql (expanded)
WITH e AS (
    UPDATE operations AS o
    SET claimed_until = now() - interval '1 microsecond', lease_token = NULL,
        updated_at = now(), revision = o.revision + 1
    WHERE o.id = ANY(%(ids)s::text[]) AND o.state = 'running'
    RETURNING o.id
)
SELECT e.id, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = e.id AND watch.until > now()))
        AS notified FROM e;
