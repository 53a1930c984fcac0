-- maintenance_try_lock, from workqueue/sql/queries.sql (expanded)
SELECT pg_try_advisory_xact_lock(hashtextextended(%(name)s, 0));
