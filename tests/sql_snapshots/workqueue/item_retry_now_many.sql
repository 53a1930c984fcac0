-- item_retry_now_many, from workqueue/sql/controls.sql (expanded)
UPDATE work_items AS w
SET state = 'queued', outcome = NULL, attempts = 0, run_after = now(), stopped_at = NULL,
    stop_requested_at = NULL, lease_token = NULL, lease_expires_at = NULL, reclaimed = false,
    acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL, claimed_by = '',
    last_error = 'retried now by an operator; the previous error was:' || chr(10) || w.last_error,
    public_id = CASE WHEN w.handed_out THEN work_mint_id('work_') ELSE w.public_id END
FROM (
    SELECT DISTINCT ON (f.queue, f.key) f.id
    FROM work_items f
    WHERE f.id = ANY (%(ids)s::bigint[]) AND f.state = 'stopped' AND f.outcome = 'failed'
      AND NOT EXISTS (
          SELECT 1 FROM work_items l
          WHERE l.queue = f.queue AND l.key = f.key AND l.state IN ('queued', 'starting', 'active')
      )
    ORDER BY f.queue, f.key, f.id DESC
) AS pick
WHERE w.id = pick.id AND w.state = 'stopped' AND w.outcome = 'failed'
RETURNING w.id, pg_notify(%(channel)s, w.queue);
