-- queue_names_in_families, from workqueue/sql/queries.sql (expanded)
WITH RECURSIVE ready(name) AS (
    (SELECT w.queue FROM work_items w WHERE w.state = 'queued' AND NOT w.wire ORDER BY w.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT w.queue FROM work_items w
            WHERE w.state = 'queued' AND NOT w.wire AND w.queue > r.name
            ORDER BY w.queue LIMIT 1)
    FROM ready r WHERE r.name IS NOT NULL
),
held(name) AS (
    (SELECT w.queue FROM work_items w WHERE w.state IN ('starting', 'active', 'stopping') ORDER BY w.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT w.queue FROM work_items w
            WHERE w.state IN ('starting', 'active', 'stopping') AND w.queue > h.name
            ORDER BY w.queue LIMIT 1)
    FROM held h WHERE h.name IS NOT NULL
)
SELECT n.name FROM (SELECT name FROM ready UNION SELECT name FROM held) AS n
WHERE n.name IS NOT NULL
  AND EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) AS p(prefix) WHERE starts_with(n.name, p.prefix))
ORDER BY n.name;
