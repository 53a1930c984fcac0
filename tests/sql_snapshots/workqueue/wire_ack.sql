-- wire_ack, from workqueue/sql/wire.sql (expanded)
WITH target AS (
    SELECT w.id, w.queue, w.run_after, w.run_after <= now() AS due,
           coalesce(w.lease_expires_at > now(), false) AND w.claimed_by <> '' AND %(worker_id)s::text <> ''
               AND w.claimed_by <> %(worker_id)s::text AS others_reservation,
           CASE WHEN c.cap IS NULL THEN true
                ELSE (
                        (SELECT count(*) FROM work_items slot_h
                         WHERE slot_h.queue = w.queue AND slot_h.state IN ('starting', 'active', 'stopping')
                           AND slot_h.lease_expires_at > now())
                        + CASE WHEN true
                               THEN (SELECT count(*) FROM work_items slot_r
                                     WHERE slot_r.queue = w.queue AND slot_r.state = 'queued' AND slot_r.wire
                                       AND slot_r.lease_expires_at > now())
                               ELSE 0 END
                    )
                     - CASE WHEN w.lease_expires_at > now() THEN 1 ELSE 0 END < c.cap END AS has_slot
    FROM work_items w
    LEFT JOIN unnest(%(queues)s::text[], %(caps)s::int[]) AS c(name, cap) ON c.name = w.queue
    WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
      AND w.state = 'queued'
    FOR UPDATE OF w
),
acked AS (
    UPDATE work_items w
    SET state = 'starting', acknowledged_at = now(), attempts = w.attempts + 1,
        lease_expires_at = now() + make_interval(secs => %(startup_s)s),
        lease_token = gen_random_uuid(), handed_out = true,
        claimed_by = CASE WHEN %(worker_id)s::text <> '' THEN %(worker_id)s::text ELSE w.claimed_by END
    FROM target t
    WHERE w.id = t.id AND t.due AND NOT t.others_reservation AND t.has_slot
    RETURNING w.id, w.public_id, w.queue, w.key, w.environment_id, w.state, w.outcome, w.priority, w.run_after,
        w.attempts, w.max_attempts, w.lease_token, w.lease_expires_at, w.reclaimed, w.metadata,
        w.trace_context, w.created_at, w.started_at, w.last_error, w.claimed_by, w.wire, w.handed_out,
        w.acknowledged_at, w.last_heartbeat_at, w.stop_requested_at, w.stopped_at
)
SELECT t.due, t.others_reservation, t.queue, t.run_after, acked.*
FROM target t LEFT JOIN acked ON true;
