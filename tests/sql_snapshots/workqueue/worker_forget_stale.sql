-- worker_forget_stale, from workqueue/sql/queries.sql (expanded)
DELETE FROM work_workers WHERE last_seen < coalesce(%(now)s, now()) - make_interval(secs => %(older_than)s);
