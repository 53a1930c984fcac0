-- schedule_sync_lock, from workqueue/sql/queries.sql (expanded)
SELECT pg_advisory_xact_lock(hashtextextended('workqueue.schedules.sync', 0));
