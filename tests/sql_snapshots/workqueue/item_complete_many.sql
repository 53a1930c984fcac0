-- item_complete_many, from workqueue/sql/queries.sql (expanded)
UPDATE work_items w
SET state = 'stopped', outcome = %(outcome)s, stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL
FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) WITH ORDINALITY AS t(id, token, n)
WHERE w.id = ANY (ARRAY(SELECT unnest(%(ids)b::bigint[]))) AND w.id = t.id AND w.lease_token = t.token
  AND w.state NOT IN ('queued', 'stopped')
RETURNING t.n;
