-- op_item_noop, from operations/sql/queries.sql (expanded)
UPDATE work_items AS w
SET state = 'stopped', outcome = 'stopped', stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
    attempts = greatest(w.attempts - 1, 0)
WHERE w.id = %(item_id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
RETURNING w.id;
