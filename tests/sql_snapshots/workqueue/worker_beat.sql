-- worker_beat, from workqueue/sql/queries.sql (expanded)
INSERT INTO work_workers AS k (id, host, pid, queues, started_at, last_seen, state, processed, failed, pool)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, now(), now(), %(state)s, %(processed)s, %(failed)s, %(pool)s)
ON CONFLICT (id) DO UPDATE
SET last_seen = now(), state = excluded.state, queues = excluded.queues, host = excluded.host,
    pid = excluded.pid, processed = excluded.processed, failed = excluded.failed, pool = excluded.pool;
