-- op_stop_reason, from operations/sql/queries.sql (expanded)
SELECT CASE
    WHEN o.attempts <> %(attempt)s THEN 'lease_lost'
    WHEN o.state = 'cancelled' OR o.cancel_requested THEN 'cancel_requested'
    WHEN o.state = 'failed' AND o.error_code IN ('hard_timeout', 'timeout') THEN 'timeout'
    ELSE 'lease_lost'
END
FROM operations AS o
WHERE o.id = %(id)s;
