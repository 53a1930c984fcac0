-- queue_notify, from workqueue/sql/queries.sql (expanded)
SELECT count(pg_notify(%(channel)s, q)) FROM unnest(%(queues)s::text[]) AS q;
