-- step_take_signal, from operations/sql/queries.sql (expanded)
WITH sig AS (
    UPDATE operations_signals AS g SET taken_at = now(), taken_by_position = %(position)s::int
    WHERE g.id = (SELECT x.id FROM operations_signals AS x
                  WHERE x.op_id = %(id)s::text AND x.name = %(name)s::text AND x.taken_at IS NULL
                  ORDER BY x.id LIMIT 1 FOR UPDATE SKIP LOCKED)
      AND EXISTS (SELECT 1 FROM operations AS held_op
                  WHERE held_op.id = %(id)s::text AND held_op.lease_token = %(token)s::uuid AND held_op.state = 'running')
    RETURNING g.id, g.payload
),
rec AS (
    INSERT INTO operations_steps AS s (op_id, position, name, kind, state, attempts, started_at, finished_at, result)
    SELECT %(id)s::text, %(position)s::int, %(name)s::text, 'wait', 'succeeded', 1, now(), now(), sig.payload
    FROM sig
    ON CONFLICT (op_id, position) DO UPDATE SET state = 'succeeded', finished_at = now(), result = excluded.result
    RETURNING s.position
)
SELECT sig.id, sig.payload, (SELECT count(*) FROM rec) AS recorded FROM sig;
