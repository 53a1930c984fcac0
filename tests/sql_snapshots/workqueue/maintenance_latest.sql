-- maintenance_latest, from workqueue/sql/dashboard.sql (expanded)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT n.name, r.started_at, r.finished_at, r.ok, r.error,
       extract(epoch FROM t.now - r.started_at) AS ago,
       extract(epoch FROM t.now - g.started_at) AS ok_ago
FROM t CROSS JOIN unnest(ARRAY['recover', 'reap']) WITH ORDINALITY AS n(name, ord)
LEFT JOIN LATERAL (
    SELECT m.started_at, m.finished_at, m.ok, m.error FROM work_maintenance_runs m
    WHERE m.name = n.name ORDER BY m.started_at DESC LIMIT 1
) AS r ON true
LEFT JOIN LATERAL (
    SELECT m.started_at FROM work_maintenance_runs m
    WHERE m.name = n.name AND m.ok ORDER BY m.started_at DESC LIMIT 1
) AS g ON true
ORDER BY n.ord;
