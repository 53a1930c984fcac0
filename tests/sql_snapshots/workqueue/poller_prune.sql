-- poller_prune, from workqueue/sql/queries.sql (expanded)
DELETE FROM work_pollers WHERE last_seen < coalesce(%(now)s, now()) - make_interval(secs => %(window)s);
