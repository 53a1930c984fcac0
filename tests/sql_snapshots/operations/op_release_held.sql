-- op_release_held, from operations/sql/queries.sql (expanded)
WITH r AS (
    UPDATE operations AS o
    SET state = 'pending', attempts = greatest(o.attempts - 1, 0), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1,
        attempt_log = CASE WHEN jsonb_array_length(o.attempt_log) = 0 THEN o.attempt_log
                 ELSE jsonb_set(o.attempt_log, ARRAY[(jsonb_array_length(o.attempt_log) - 1)::text],
                                (o.attempt_log -> -1) || jsonb_build_object('finished_at', now()) || jsonb_build_object('outcome', 'released'))
            END
    FROM unnest(%(ids)s::text[], %(tokens)s::uuid[]) AS t(id, token)
    WHERE o.id = t.id AND o.lease_token = t.token AND o.state = 'running'
    RETURNING o.id
)
SELECT r.id, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = r.id AND watch.until > now()))
        AS notified FROM r;
