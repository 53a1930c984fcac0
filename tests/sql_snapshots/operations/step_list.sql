-- step_list, from operations/sql/queries.sql (expanded)
SELECT s.position, s.name, s.kind, s.state, s.attempts, s.result, s.error, s.wake_at,
       coalesce(s.wake_at <= now(), false) AS due
FROM operations_steps AS s
WHERE s.op_id = %(id)s::text
ORDER BY s.position;
