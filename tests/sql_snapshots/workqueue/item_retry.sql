-- item_retry, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'queued', run_after = now() + make_interval(secs => %(delay)s), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s, reclaimed = false,
    connection_losses = CASE WHEN %(connection_lost)s::bool THEN connection_losses + 1 ELSE 0 END
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active')
RETURNING id;
