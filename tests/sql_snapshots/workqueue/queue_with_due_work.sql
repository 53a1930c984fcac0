-- queue_with_due_work, from workqueue/sql/queries.sql (expanded)
SELECT u.name FROM unnest(%(queues)s::text[]) AS u(name)
WHERE EXISTS (
          SELECT 1 FROM work_items w
          WHERE w.state = 'queued' AND NOT w.wire AND w.queue = u.name AND w.run_after <= now()
      )
   OR EXISTS (
          SELECT 1 FROM work_items w
          WHERE w.state IN ('starting', 'active') AND NOT w.wire AND w.queue = u.name AND w.lease_expires_at < now()
      );
