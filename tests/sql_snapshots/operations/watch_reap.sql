-- watch_reap, from operations/sql/queries.sql (expanded)
DELETE FROM operations_watches WHERE until < coalesce(%(now)s, now()) - interval '1 minute';
