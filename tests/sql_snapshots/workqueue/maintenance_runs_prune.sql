-- maintenance_runs_prune, from workqueue/sql/queries.sql (expanded)
DELETE FROM work_maintenance_runs WHERE started_at < coalesce(%(now)s, now()) - make_interval(secs => %(older_than)s);
