-- wire_full_queues, from workqueue/sql/wire.sql (expanded)
SELECT u.name
FROM unnest(%(queues)s::text[], %(caps)s::int[]) AS u(name, cap)
WHERE u.cap <= (
        (SELECT count(*) FROM work_items slot_h
         WHERE slot_h.queue = u.name AND slot_h.state IN ('starting', 'active', 'stopping')
           AND slot_h.lease_expires_at > now())
        + CASE WHEN true
               THEN (SELECT count(*) FROM work_items slot_r
                     WHERE slot_r.queue = u.name AND slot_r.state = 'queued' AND slot_r.wire
                       AND slot_r.lease_expires_at > now())
               ELSE 0 END
    );
