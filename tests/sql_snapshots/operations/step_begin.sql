-- step_begin, from operations/sql/queries.sql (expanded)
WITH op AS (
    SELECT held_op.cancel_requested FROM operations AS held_op
    WHERE held_op.id = %(id)s::text AND held_op.lease_token = %(token)s::uuid AND held_op.state = 'running'
),
ins AS (
    INSERT INTO operations_steps AS s (op_id, position, name, kind, state, attempts, started_at)
    SELECT %(id)s::text, %(position)s::int, %(name)s::text, 'step', 'running', 1, now()
    FROM op WHERE NOT op.cancel_requested
    ON CONFLICT (op_id, position) DO UPDATE SET attempts = s.attempts + 1, state = 'running', error = NULL
    RETURNING s.attempts
)
SELECT (SELECT ins.attempts FROM ins), op.cancel_requested FROM op;
