-- op_reap, from operations/sql/queries.sql (expanded)
WITH doomed AS (
    SELECT id FROM operations
    WHERE state IN ('succeeded', 'failed', 'cancelled')
      AND finished_at < coalesce(%(now)s, now()) - make_interval(secs => %(retention)s)
      AND parent_id IS NULL
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
steps AS (
    DELETE FROM operations_steps AS s WHERE s.op_id IN (SELECT id FROM doomed)
),
signals AS (
    DELETE FROM operations_signals AS g WHERE g.op_id IN (SELECT id FROM doomed)
),
gone AS (
    SELECT id FROM doomed
    UNION ALL
    SELECT k.id FROM operations AS k WHERE k.parent_id IS NOT NULL AND k.parent_id IN (SELECT id FROM doomed)
),
edges AS (
    DELETE FROM operations_dependencies AS e
    WHERE e.id IN (SELECT x.id FROM operations_dependencies AS x WHERE x.op_id IN (SELECT id FROM gone)
                   UNION
                   SELECT x.id FROM operations_dependencies AS x WHERE x.decided AND x.after_id IN (SELECT id FROM gone))
)
DELETE FROM operations
WHERE id IN (SELECT id FROM doomed)
   OR (parent_id IS NOT NULL AND parent_id IN (SELECT id FROM doomed));
