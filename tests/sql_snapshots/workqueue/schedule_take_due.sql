-- schedule_take_due, from workqueue/sql/queries.sql (expanded)
SELECT s.id, s.name, s.target, s.queue, s.key_prefix, s.metadata, s.priority, s.kind, s.request, s.task,
       s.args, s.cron, s.every, s.timezone, s.misfire, s.last_slot, s.next_slot,
       coalesce(%(now)s::timestamptz, now()) AS now
FROM work_schedules s
WHERE s.enabled AND s.removed_at IS NULL
  AND s.next_slot <= coalesce(%(now)s::timestamptz, now())
ORDER BY s.next_slot, s.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
