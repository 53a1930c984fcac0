-- op_deps_due, from operations/sql/queries.sql (expanded)
SELECT a.id FROM operations AS a
WHERE a.id IN (SELECT e.after_id FROM operations_dependencies AS e WHERE NOT e.decided)
  AND a.state IN ('succeeded', 'failed', 'cancelled')
ORDER BY a.finished_at
LIMIT %(limit)s
FOR UPDATE OF a SKIP LOCKED;
