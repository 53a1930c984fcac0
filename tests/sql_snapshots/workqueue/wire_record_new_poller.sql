-- wire_record_new_poller, from workqueue/sql/wire.sql (expanded)
WITH env AS (
    SELECT e.id FROM work_environments e WHERE e.id = %(environment_id)s AND e.kind = 'self_hosted'
), pruned AS (
    DELETE FROM work_pollers
    WHERE environment_id = %(environment_id)s AND last_seen < now() - make_interval(secs => %(window_s)s)
), live AS (
    SELECT count(*) AS n FROM work_pollers p
    WHERE p.environment_id = %(environment_id)s AND p.last_seen >= now() - make_interval(secs => %(window_s)s)
), added AS (
    INSERT INTO work_pollers (environment_id, worker_id, last_seen)
    SELECT env.id, %(worker_id)s, now() FROM env, live WHERE live.n < %(max_pollers)s
    ON CONFLICT (environment_id, worker_id) DO UPDATE SET last_seen = excluded.last_seen
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM env), EXISTS (SELECT 1 FROM added);
