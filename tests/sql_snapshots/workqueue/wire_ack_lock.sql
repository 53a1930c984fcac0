-- wire_ack_lock, from workqueue/sql/wire.sql (expanded)
SELECT pg_advisory_xact_lock(hashtextextended('workqueue.max_running:' || w.queue, 0))
FROM work_items w
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND w.state = 'queued' AND w.queue = ANY (%(queues)s::text[]);
