-- item_requeue, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'queued', run_after = now(), lease_token = NULL, lease_expires_at = NULL,
    attempts = 0, reclaimed = false, connection_losses = 0
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active')
RETURNING id;
