-- queue_starts_prune, from workqueue/sql/controls.sql (expanded)
DELETE FROM work_queue_starts WHERE started_at < coalesce(%(now)s, now()) - make_interval(secs => %(older_than)s);
