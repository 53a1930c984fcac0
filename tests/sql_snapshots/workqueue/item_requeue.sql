-- item_requeue, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'queued', run_after = now(), lease_token = NULL, lease_expires_at = NULL,
    attempts = 0, reclaimed = false, connection_losses = 0,
    attempt_log = (CASE WHEN jsonb_array_length(work_items.attempt_log) >= 20 THEN work_items.attempt_log - 0 ELSE work_items.attempt_log END)
        || jsonb_build_array(jsonb_build_object(
               'attempt', work_items.attempts, 'worker', work_items.claimed_by, 'started_at', work_items.started_at, 'ended_at', now(),
               'outcome', 'requeued'::text, 'error', NULL::text))
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active')
RETURNING id;
