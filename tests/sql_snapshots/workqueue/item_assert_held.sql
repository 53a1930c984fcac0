-- item_assert_held, from workqueue/sql/queries.sql (expanded)
SELECT w.id FROM work_items AS w
WHERE w.id = %(id)s AND w.lease_token = %(token)s AND w.state IN ('starting', 'active', 'stopping')
FOR UPDATE;
