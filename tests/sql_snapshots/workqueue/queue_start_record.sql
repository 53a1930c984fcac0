-- queue_start_record, from workqueue/sql/controls.sql (expanded)
INSERT INTO work_queue_starts (queue, group_key, started_at)
SELECT w.queue, w.group_key, now() FROM work_items w WHERE w.id = %(id)s;
