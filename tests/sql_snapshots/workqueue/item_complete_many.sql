-- item_complete_many, from workqueue/sql/queries.sql (expanded)
WITH p AS MATERIALIZED (SELECT %(ids)b::bigint[] AS ids, %(tokens)b::uuid[] AS tokens)
UPDATE work_items w
SET state = 'stopped', outcome = %(outcome)s, stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL
FROM p
WHERE w.id = ANY (ARRAY(SELECT unnest(%(ids)b::bigint[]))) AND w.state NOT IN ('queued', 'stopped')
  AND p.tokens[width_bucket(w.lease_token, p.tokens)] = w.lease_token AND p.ids[width_bucket(w.lease_token, p.tokens)] = w.id
RETURNING w.id;
