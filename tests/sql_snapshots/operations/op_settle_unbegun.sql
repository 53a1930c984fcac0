-- op_settle_unbegun, from operations/sql/queries.sql (expanded)
WITH held AS (
    SELECT w.id FROM work_items AS w
    WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
    FOR UPDATE
),
gone AS (
    UPDATE operations AS o
    SET state = CASE WHEN o.cancel_requested THEN 'cancelled' ELSE 'failed' END,
        error_code = CASE WHEN o.cancel_requested THEN '' ELSE 'attempts_exhausted' END,
        error_retryable = CASE WHEN o.cancel_requested THEN NULL ELSE true END,
        error_message = CASE WHEN o.cancel_requested THEN ''
                             ELSE left(coalesce(nullif(o.error_message, ''),
                                                format('gave up after %%s attempts', o.attempts)), 1024) END,
        finished_at = now(), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1
    FROM held
    WHERE o.id = %(id)s
      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until < now()))
      AND (o.cancel_requested OR o.attempts >= o.max_attempts)
    RETURNING o.id, o.state, o.attempts, o.max_attempts
),
item AS (
    UPDATE work_items AS w
    SET state = 'stopped', outcome = CASE gone.state WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END, stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
        last_error = CASE gone.state WHEN 'cancelled' THEN 'operation cancelled before this attempt began'
                                     ELSE format(
                                             'lease lapsed on attempt %%s of %%s (the holder died or stalled); attempts are spent, so it is not retried',
                                             gone.attempts, gone.max_attempts
                                         ) END,
        attempt_log = CASE WHEN CASE gone.state WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END = 'succeeded' THEN w.attempt_log ELSE (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
            || jsonb_build_array(jsonb_build_object(
                   'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
                   'outcome', CASE gone.state WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END::text, 'error', CASE gone.state WHEN 'cancelled' THEN 'operation cancelled before this attempt began'
                                                ELSE format(
                                                        'lease lapsed on attempt %%s of %%s (the holder died or stalled); attempts are spent, so it is not retried',
                                                        gone.attempts, gone.max_attempts
                                                    ) END::text)) END
    FROM gone
    WHERE w.id = %(item_id)s
    RETURNING w.id
)
SELECT gone.id, gone.state, (SELECT pg_notify(%(channel)s::text, '')
     WHERE %(channel)s::text <> ''
       AND EXISTS (SELECT 1 FROM operations_watches AS watch WHERE watch.op_id = gone.id AND watch.until > now()))
        AS notified FROM gone;
