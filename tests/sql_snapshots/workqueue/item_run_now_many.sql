-- item_run_now_many, from workqueue/sql/controls.sql (expanded)
UPDATE work_items AS w
SET run_after = now()
WHERE w.id = ANY (%(ids)s::bigint[]) AND w.state = 'queued' AND w.run_after > now()
RETURNING w.id, pg_notify(%(channel)s, w.queue);
