-- watch_forget, from operations/sql/queries.sql (expanded)
DELETE FROM operations_watches
WHERE watcher = %(watcher)s AND (%(ids)s::text[] IS NULL OR op_id = ANY(%(ids)s::text[]));
