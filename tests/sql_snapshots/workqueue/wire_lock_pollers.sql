-- wire_lock_pollers, from workqueue/sql/wire.sql (expanded)
SELECT pg_advisory_xact_lock(hashtextextended('work_pollers:' || %(environment_id)s, 0));
