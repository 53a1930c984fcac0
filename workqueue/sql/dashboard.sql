-- The admin's statements: the queue dashboard (workqueue/dashboard.py) and the change list's
-- estimated count (workqueue/admin.py). Same conventions as queries.sql. Every statement
-- takes the instant it describes as %(now)s (NULL = the database's now()), so one page reads
-- the clock once and every number on it is as of that instant.


-- name: dashboard_clock
-- The database's clock: the one instant a dashboard page is computed for. statement_timestamp()
-- rather than now(): inside a long transaction (ATOMIC_REQUESTS, tests) now() is when the
-- transaction began, and statement_timestamp() is what Django's Now() in the QuerySet scopes reads.
SELECT statement_timestamp();


-- name: queue_stats
-- Per queue counts over the unsettled rows only: the WHERE is exactly the predicate of the
-- partial index work_items_unsettled_keyed_idx, so the stopped rows (nearly all of a big table)
-- are never read. Each FILTER is one WorkItemQuerySet scope: ready(), scheduled(), pending(),
-- running(), stopping(), stuck(); live_held is what max_running counts inside the claim
-- (held under a live lease, stopping included). oldest_wait is how long the longest-waiting
-- due item has waited since its run_after. A held_back queue (paused, or under a per-group cap
-- or a rate: workqueue.controls.held_back_queues) waits by design: its queued items are not stuck.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT w.queue,
       count(*) FILTER (WHERE w.state = 'queued' AND w.run_after <= t.now
                         AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= t.now)) AS ready,
       count(*) FILTER (WHERE w.state = 'queued' AND w.run_after > t.now) AS scheduled,
       count(*) FILTER (WHERE w.state = 'queued' AND w.lease_expires_at > t.now) AS pending,
       count(*) FILTER (WHERE w.state IN {states_running}) AS running,
       count(*) FILTER (WHERE w.state = 'stopping') AS stopping,
       count(*) FILTER (WHERE (w.state IN {states_held} AND w.lease_expires_at < t.now)
                          OR (w.state = 'queued' AND w.queue <> ALL (%(held_back)s::text[])
                              AND w.run_after < t.now - make_interval(secs => %(stuck_after)s))) AS stuck,
       count(*) FILTER (WHERE w.state IN {states_held}
                          AND w.lease_expires_at > t.now) AS live_held,
       extract(epoch FROM t.now - min(w.run_after) FILTER (WHERE w.state = 'queued' AND w.run_after <= t.now))
           AS oldest_wait
FROM work_items w CROSS JOIN t
WHERE {unsettled_keyed:w}
GROUP BY w.queue, t.now;


-- name: worker_liveness
-- Running workers alive (seen within the stale window) and stale (not seen since), per queue
-- they serve and in all (queue NULL). Workers that exited cleanly (state 'stopped') are neither.
-- The workers table is small: reap forgets rows not seen for WORKER_FORGET_AFTER.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT q.queue,
       count(*) FILTER (WHERE k.last_seen >= t.now - make_interval(secs => %(stale_after)s)) AS alive,
       count(*) FILTER (WHERE k.last_seen < t.now - make_interval(secs => %(stale_after)s)) AS stale
FROM work_workers k CROSS JOIN t CROSS JOIN LATERAL jsonb_array_elements_text(k.queues) AS q(queue)
WHERE k.state <> 'stopped'
GROUP BY q.queue
UNION ALL
SELECT NULL,
       count(*) FILTER (WHERE k.last_seen >= t.now - make_interval(secs => %(stale_after)s)),
       count(*) FILTER (WHERE k.last_seen < t.now - make_interval(secs => %(stale_after)s))
FROM work_workers k CROSS JOIN t
WHERE k.state <> 'stopped';


-- name: environment_stats
-- Per self_hosted environment (first %(limit)s by name; total is how many there are): depth
-- (wire items due and not reserved), pending (reserved by a live poll), and distinct workers
-- that polled within the polling window. The item counts read work_items_poll_idx, whose
-- predicate (state = 'queued' AND wire) is the inner WHERE, one environment at a time.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT e.id, e.name, d.depth, d.pending, p.polling,
       (SELECT count(*) FROM work_environments x WHERE x.kind = 'self_hosted') AS total
FROM work_environments e CROSS JOIN t
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE w.run_after <= t.now
                              AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= t.now)) AS depth,
           count(*) FILTER (WHERE w.lease_expires_at > t.now) AS pending
    FROM work_items w
    WHERE w.environment_id = e.id AND w.state = 'queued' AND w.wire
) AS d
CROSS JOIN LATERAL (
    SELECT count(*) AS polling FROM work_pollers p
    WHERE p.environment_id = e.id AND p.last_seen >= t.now - make_interval(secs => %(window)s)
) AS p
WHERE e.kind = 'self_hosted'
ORDER BY e.name
LIMIT %(limit)s;


-- name: maintenance_latest
-- The latest run of each sweep and the latest one that succeeded, with their ages in seconds.
-- One index probe per sweep on work_maint_name_started_idx (name, started_at DESC).
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


-- name: table_row_estimate
-- The planner's row count for a table (pg_class.reltuples, kept by ANALYZE and autovacuum):
-- the change list shows it instead of running COUNT(*) over millions of rows. -1 = never
-- analyzed.
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%(table)s::text);


-- name: queue_schedules
-- Active schedules feeding each queue: a work-item schedule's own queue, or (operations and
-- tasks, whose queue the operations app picks) the queue its last run went to.
SELECT coalesce(nullif(queue, ''), nullif(last_queue, '')) AS q, count(*)
FROM work_schedules
WHERE enabled AND removed_at IS NULL
GROUP BY 1;
