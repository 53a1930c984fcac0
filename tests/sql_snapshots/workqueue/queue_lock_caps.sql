-- queue_lock_caps, from workqueue/sql/queries.sql (expanded)
SELECT count(pg_advisory_xact_lock(hashtextextended('workqueue.max_running:' || q, 0)))
FROM (SELECT q FROM unnest(%(queues)s::text[]) AS q ORDER BY q) AS ordered;
