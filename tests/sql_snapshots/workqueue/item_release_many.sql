-- item_release_many, from workqueue/sql/queries.sql (expanded)
WITH p AS MATERIALIZED (SELECT %(ids)s::bigint[] AS ids, %(tokens)s::uuid[] AS tokens)
UPDATE work_items w
SET state = 'queued', attempts = greatest(w.attempts - 1, 0), lease_token = NULL,
    lease_expires_at = NULL, reclaimed = false, claimed_by = '',
    attempt_log = (CASE WHEN jsonb_array_length(w.attempt_log) >= 20 THEN w.attempt_log - 0 ELSE w.attempt_log END)
        || jsonb_build_array(jsonb_build_object(
               'attempt', w.attempts, 'worker', w.claimed_by, 'started_at', w.started_at, 'ended_at', now(),
               'outcome', 'released'::text, 'error', NULL::text))
FROM p
WHERE w.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[]))) AND w.state NOT IN ('queued', 'stopped') AND w.state <> 'stopping'
  AND p.tokens[width_bucket(w.lease_token, p.tokens)] = w.lease_token AND p.ids[width_bucket(w.lease_token, p.tokens)] = w.id
RETURNING w.id;
