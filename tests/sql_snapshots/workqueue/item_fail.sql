-- item_fail, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'stopped', outcome = 'failed', stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s,
    connection_losses = CASE WHEN %(connection_lost)s::bool THEN connection_losses + 1 ELSE 0 END
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active', 'stopping')
RETURNING id;
