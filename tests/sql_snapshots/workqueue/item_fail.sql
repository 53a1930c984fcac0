-- item_fail, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'stopped', outcome = 'failed', stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s,
    connection_losses = CASE WHEN %(connection_lost)s::bool THEN connection_losses + 1 ELSE 0 END,
    attempt_log = (CASE WHEN jsonb_array_length(work_items.attempt_log) >= 20 THEN work_items.attempt_log - 0 ELSE work_items.attempt_log END)
        || jsonb_build_array(jsonb_build_object(
               'attempt', work_items.attempts, 'worker', work_items.claimed_by, 'started_at', work_items.started_at, 'ended_at', now(),
               'outcome', 'failed'::text, 'error', %(error)s::text))
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active', 'stopping')
RETURNING id;
