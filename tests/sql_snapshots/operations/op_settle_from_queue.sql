-- op_settle_from_queue, from operations/sql/queries.sql (expanded)
WITH s AS (
    UPDATE operations AS o
    SET state = %(state)s::text,
        cancel_requested = o.cancel_requested OR %(state)s::text = 'cancelled',
        error_code = %(error_code)s::text,
        error_message = left(CASE WHEN %(error_code)s::text = 'attempts_exhausted'
                                  THEN coalesce(nullif(o.error_message, ''), %(error_message)s::text)
                                  ELSE %(error_message)s::text END, 1024),
        error_retryable = CASE WHEN %(error_code)s::text = '' THEN NULL
                               ELSE %(error_code)s::text = 'attempts_exhausted' END,
        finished_at = now(), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1
    WHERE o.id = ANY(%(ids)s::text[]) AND o.state IN ('pending', 'running')
    RETURNING o.id
)
SELECT s.id, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = s.id AND watch.until > now()))
        AS notified FROM s;
