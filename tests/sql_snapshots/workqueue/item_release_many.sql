-- item_release_many, from workqueue/sql/queries.sql (expanded)
UPDATE work_items w
SET state = 'queued', attempts = greatest(w.attempts - 1, 0), lease_token = NULL,
    lease_expires_at = NULL, reclaimed = false, claimed_by = ''
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS t(id, token)
WHERE w.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[]))) AND w.id = t.id AND w.lease_token = t.token
  AND w.state IN ('starting', 'active')
RETURNING w.id, t.token;
