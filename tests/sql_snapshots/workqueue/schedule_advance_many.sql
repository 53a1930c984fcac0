-- schedule_advance_many, from workqueue/sql/queries.sql (expanded)
UPDATE work_schedules s
SET last_slot = CASE WHEN u.last_slot IS NULL THEN s.last_slot
                     ELSE greatest(s.last_slot, u.last_slot) END,
    next_slot = u.next_slot,
    last_fired_at = CASE WHEN u.fired > 0 THEN coalesce(%(now)s::timestamptz, now()) ELSE s.last_fired_at END,
    last_queue = CASE WHEN u.fired > 0 THEN u.last_queue ELSE s.last_queue END,
    last_key = CASE WHEN u.fired > 0 THEN u.last_key ELSE s.last_key END,
    last_error = u.last_error,
    fired = s.fired + u.fired,
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(last_slots)s::timestamptz[], %(next_slots)s::timestamptz[],
            %(last_queues)s::text[], %(last_keys)s::text[], %(errors)s::text[], %(fired)s::int[])
     AS u(id, last_slot, next_slot, last_queue, last_key, last_error, fired)
WHERE s.id = u.id;
