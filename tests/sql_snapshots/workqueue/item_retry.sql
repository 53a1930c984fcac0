-- item_retry, from workqueue/sql/queries.sql (expanded)
UPDATE work_items
SET state = 'queued', run_after = now() + make_interval(secs => %(delay)s), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s, reclaimed = false
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active')
RETURNING id;
