-- schedule_notify, from workqueue/sql/queries.sql (expanded)
SELECT pg_notify(%(channel)s, '#schedules');
