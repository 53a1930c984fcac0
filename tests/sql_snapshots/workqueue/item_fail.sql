-- item_fail, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'stopped', outcome = 'failed', stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active', 'stopping')
RETURNING id;
