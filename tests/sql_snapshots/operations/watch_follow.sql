-- watch_follow, from operations/sql/queries.sql (expanded)
INSERT INTO operations_watches AS w (op_id, watcher, until)
SELECT unnest(%(ids)s::text[]), %(watcher)s, now() + make_interval(secs => %(ttl)s)
ON CONFLICT (op_id, watcher) DO UPDATE SET until = excluded.until;
