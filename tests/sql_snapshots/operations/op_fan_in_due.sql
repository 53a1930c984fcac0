-- op_fan_in_due, from operations/sql/queries.sql (expanded)
SELECT o.id FROM operations AS o
WHERE o.parent_id IS NOT NULL AND NOT o.fanned_in AND o.state IN ('succeeded', 'failed', 'cancelled')
ORDER BY o.finished_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;
