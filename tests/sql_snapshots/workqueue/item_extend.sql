-- item_extend, from workqueue/sql/queries.sql (expanded)
UPDATE work_items AS w SET lease_expires_at = now() + make_interval(secs => %(lease)s)
WHERE w.id = %(id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active')
RETURNING w.lease_expires_at;
