-- op_stranded, from operations/sql/queries.sql (expanded)
SELECT o.id, o.queue, o.attempts, o.max_attempts, o.priority
FROM operations AS o
WHERE ((o.state = 'pending' AND o.deps_open = 0 AND o.updated_at < coalesce(%(now)s, now()) - make_interval(secs => %(after)s))
    OR (o.state = 'running' AND o.claimed_until < coalesce(%(now)s, now()) - make_interval(secs => %(after)s)))
  AND NOT EXISTS (SELECT 1 FROM work_items AS live WHERE live.queue = o.queue AND live.key = o.id
              AND live.state IN ('queued', 'starting', 'active'))
ORDER BY o.updated_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;
