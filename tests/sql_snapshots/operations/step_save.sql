-- step_save, from operations/sql/queries.sql (expanded)
INSERT INTO operations_steps AS s (op_id, position, name, kind, state, attempts, started_at, finished_at, wake_at,
                          result, error)
SELECT %(id)s::text, %(position)s::int, %(name)s::text, %(kind)s::text, %(state)s::text, 1, now(),
       CASE WHEN %(state)s::text IN ('succeeded', 'failed', 'timed_out') THEN now() END,
       CASE WHEN %(wait_s)s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %(wait_s)s::float8) END,
       %(result)s::jsonb, %(error)s::jsonb
WHERE EXISTS (SELECT 1 FROM operations AS held_op
            WHERE held_op.id = %(id)s::text AND held_op.lease_token = %(token)s::uuid AND held_op.state = 'running')
ON CONFLICT (op_id, position) DO UPDATE
SET state = excluded.state, finished_at = excluded.finished_at, result = excluded.result, error = excluded.error,
    wake_at = CASE WHEN %(keep_wake)s::bool THEN s.wake_at ELSE excluded.wake_at END
RETURNING s.wake_at, coalesce(s.wake_at <= now(), false) AS due;
