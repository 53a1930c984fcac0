-- item_stop_reason, from workqueue/sql/queries.sql (expanded)
SELECT CASE
    WHEN w.attempts <> %(attempts)s THEN 'lease_lost'
    WHEN w.state = 'stopped' AND w.outcome = 'cancelled' THEN 'cancel_requested'
    WHEN w.state = 'stopping' AND w.lease_token = %(token)s THEN 'cancel_requested'
    WHEN w.state = 'stopped' AND w.outcome = 'failed' AND w.last_error LIKE 'hard timeout:%%' THEN 'timeout'
    ELSE 'lease_lost'
END
FROM work_items w
WHERE w.id = %(id)s;
