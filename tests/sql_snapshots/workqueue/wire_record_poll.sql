-- wire_record_poll, from workqueue/sql/wire.sql (expanded)
WITH pruned AS (
    DELETE FROM work_pollers
    WHERE environment_id = %(environment_id)s AND worker_id <> %(worker_id)s
      AND last_seen < now() - make_interval(secs => %(window_s)s)
)
UPDATE work_pollers SET last_seen = now()
WHERE environment_id = %(environment_id)s AND worker_id = %(worker_id)s
RETURNING 1, (SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit;
