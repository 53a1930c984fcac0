-- item_connection_losses, from workqueue/sql/queries.sql (expanded)
SELECT connection_losses FROM work_items
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('starting', 'active');
