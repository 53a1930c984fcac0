-- item_release_lost_connection, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'queued', attempts = greatest(attempts - 1, 0), lease_token = NULL,
    lease_expires_at = NULL, reclaimed = false, claimed_by = '', last_error = %(error)s,
    connection_losses = connection_losses + 1
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active')
RETURNING id;
