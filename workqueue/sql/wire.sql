-- The statements of the HTTP pull API for self-hosted workers (workqueue/wire/store.py).
-- A block starts with "-- name: <name>"; the comment lines under it say what it does and
-- why its predicate has that shape. {item} expands to the Item column list (workqueue/sql/generated.py).
--
-- Wire-visible, applied by every statement that reads or writes a work item here:
--     w.environment_id = %(environment_id)s AND w.wire
-- `wire` is set at enqueue for exactly the items of an over_wire queue in a self_hosted
-- environment, so this one predicate is "the path's environment, self_hosted, over_wire".
-- Leases are decided by the database clock (now()) only. State sets come from
-- workqueue/states.py ({states_running}); the work-item fragments ({lapsed_settle:W}, ...)
-- are in fragments.sql, whose top lists them all.


-- name: wire_auth_environment_key
-- Resolve an environment key: one indexed probe on the unique key_hash.
SELECT e.id, e.kind, e.key_hash
FROM work_environments e
WHERE e.key_hash = %(digest)s;


-- name: wire_auth_api_key
-- Resolve a control-plane API key and, in the same probe, the path's environment (NULL
-- when it does not exist, or when the key is limited to environments that do not include
-- it), so one request costs one query. Site-wide is the key's own flag, set only when it was
-- created as such: a scoped key whose environment rows were all deleted (they cascade with
-- their environment) acts on nothing (`usable` false: 401), it never becomes site-wide.
SELECT k.key_hash, k.revoked, e.id, e.kind,
    k.site_wide OR EXISTS (SELECT 1 FROM work_api_key_environments ke WHERE ke.apikey_id = k.id) AS usable
FROM work_api_keys k
LEFT JOIN work_environments e ON e.id = %(environment_id)s
    AND (
        k.site_wide
        OR EXISTS (
            SELECT 1 FROM work_api_key_environments ke WHERE ke.apikey_id = k.id AND ke.environment_id = e.id
        )
    )
WHERE k.key_hash = %(digest)s;


-- name: wire_poll
-- Hand out the best claimable item as a soft reservation (it stays queued until acked).
-- Claimable: a due queued item with no live reservation (never polled, or its reserving
-- call's window lapsed), or a starting/active item whose lease lapsed (its worker died),
-- which is reset to a fresh queued item. Order is claim's: priority, run_after, age (id).
-- A re-hand-out (handed_out already true) mints a fresh public id in the same UPDATE, so
-- a revived stale worker's ack/heartbeat/stop hit 404; the first hand-out keeps its id.
-- Queues whose max_running is full (wire_full_queues, under the caller's per-queue advisory
-- lock) are skipped and left untouched, and so are the queues and groups flow control holds
-- back (queue_flow_blocked in controls.sql; flow_wire_gate in fragments.sql).
-- They come in as a plain array rather than a CTE so
-- the planner keeps walking work_items_poll_idx in order and stops at the first row.
-- Two bounded side jobs ride along as data-modifying CTEs (Postgres runs them whether or
-- not the result reads them), each SKIP LOCKED so concurrent polls never wait on each other:
-- stopping items whose lease lapsed are finalized (nobody is left to finish them), and
-- lapsed holders that spent their attempts are settled failed instead of handed out again.
-- The three predicates are disjoint, so no row is touched twice.
WITH finalized AS (
    UPDATE work_items w
    SET state = 'stopped', outcome = coalesce(w.outcome, 'stopped'), stopped_at = now(),
        lease_token = NULL, lease_expires_at = NULL
    FROM (
        SELECT s.id FROM work_items s
        WHERE s.environment_id = %(environment_id)s AND s.wire AND s.state = 'stopping'
          AND (s.lease_expires_at IS NULL OR s.lease_expires_at < now())
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) AS f
    WHERE w.id = f.id
    RETURNING 'finalized'::text AS verdict, {item}
),
exhausted AS (
    UPDATE work_items w
    SET {lapsed_settle:w}
    FROM (
        SELECT s.id FROM work_items s
        WHERE s.environment_id = %(environment_id)s AND s.wire AND s.state IN {states_running}
          AND s.lease_expires_at < now() AND {lapsed_spent:s}
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) AS x
    WHERE w.id = x.id
    RETURNING 'exhausted'::text AS verdict, {item}
),
ready AS (
    SELECT r.id, false AS lapsed, r.priority, r.run_after
    FROM work_items r
    WHERE r.environment_id = %(environment_id)s AND r.wire AND r.state = 'queued'
      AND r.run_after <= now() AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= now())
      AND r.queue <> ALL (%(full_queues)s::text[]) AND {flow_wire_gate:r}
    ORDER BY r.priority DESC, r.run_after, r.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
lapsed AS (
    SELECT l.id, true AS lapsed, l.priority, l.run_after
    FROM work_items l
    WHERE l.environment_id = %(environment_id)s AND l.wire AND l.state IN {states_running}
      AND l.lease_expires_at < now() AND NOT {lapsed_spent:l} AND l.run_after <= now()
      AND l.queue <> ALL (%(full_queues)s::text[]) AND {flow_wire_gate:l}
    ORDER BY l.priority DESC, l.run_after, l.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
pick AS (
    SELECT * FROM ready
    UNION ALL
    SELECT * FROM lapsed
    ORDER BY priority DESC, run_after, id
    LIMIT 1
),
handed AS (
    UPDATE work_items w
    SET state = 'queued',
        public_id = CASE WHEN w.handed_out THEN work_mint_id('work_') ELSE w.public_id END,
        handed_out = true,
        lease_expires_at = now() + make_interval(secs => %(reserve_s)s),
        lease_token = NULL,
        acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL,
        reclaimed = w.reclaimed OR p.lapsed,
        claimed_by = %(worker_id)s
    FROM pick p
    WHERE w.id = p.id
    RETURNING 'handed'::text AS verdict, {item}
)
SELECT * FROM handed
UNION ALL
SELECT * FROM finalized
UNION ALL
SELECT * FROM exhausted;


-- name: wire_full_queues
-- Of the capped wire queues, those with no free slot (slots_used in fragments.sql: live
-- holders plus live poll reservations, each one ack away from holding a slot; the same count
-- claim and ack use). Run under the per-queue advisory lock (queue_lock_caps) so the counts
-- cannot move before the poll that uses them.
SELECT u.name
FROM unnest(%(queues)s::text[], %(caps)s::int[]) AS u(name, cap)
WHERE u.cap <= {slots_used:u.name, true};


-- name: wire_ack_lock
-- Before an ack of an item on a capped wire queue: take that queue's max_running lock (the
-- one claim and poll take, queue_lock_caps), so the ack's count of used slots cannot move.
-- Its own statement, so that wire_ack's snapshot sees what the lock's previous holder did.
-- Nothing is locked for an uncapped queue or an item that is not queued (a repeated ack).
SELECT {cap_lock:w.queue}
FROM work_items w
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND w.state = 'queued' AND w.queue = ANY (%(queues)s::text[]);


-- name: wire_ack
-- queued -> starting: stamp acknowledged_at, install the startup lease, charge the attempt
-- and mint the lease proof; only for an item that is due (run_after passed), not under a
-- live reservation of another worker (when the acker names itself; otherwise the id it was
-- handed is its proof, as every re-hand-out mints a new one), and, on a capped queue, with
-- a free slot: slots_used by everything else stays below the cap (its own live reservation
-- already holds a slot). The queued row is locked first and the verdict returned: one row,
-- (due, others_reservation, queue, run_after, the acked item's columns or NULLs). Only the queued
-- edge writes: for any other state (a repeated ack) nothing comes back and the caller reads
-- the row to answer. handed_out is set here too, so an item acked without a poll still gets
-- a fresh id if it is ever re-offered.
WITH target AS (
    SELECT w.id, w.queue, w.run_after, w.run_after <= now() AS due,
           coalesce(w.lease_expires_at > now(), false) AND w.claimed_by <> '' AND %(worker_id)s::text <> ''
               AND w.claimed_by <> %(worker_id)s::text AS others_reservation,
           CASE WHEN c.cap IS NULL THEN true
                ELSE {slots_used:w.queue, true}
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
    RETURNING {item}
)
SELECT t.due, t.others_reservation, t.queue, t.run_after, acked.*
FROM target t LEFT JOIN acked ON true;


-- name: wire_heartbeat
-- The wire's optimistic-concurrency heartbeat. %(claim)s (NO_HEARTBEAT) takes a starting
-- item that has never beaten to active; otherwise the row must be active with exactly the
-- echoed last_heartbeat_at. Either way the lease moves to now() + ttl and the proof stays.
-- The new last_heartbeat_at is strictly later than the old one, so an echo is never
-- ambiguous even for two beats inside one clock tick. Zero rows: the caller reads the row.
UPDATE work_items w
SET state = 'active',
    started_at = CASE WHEN w.state = 'starting' THEN now() ELSE w.started_at END,
    last_heartbeat_at = CASE WHEN w.last_heartbeat_at IS NULL THEN now()
                             ELSE greatest(now(), w.last_heartbeat_at + interval '1 microsecond') END,
    lease_expires_at = now() + make_interval(secs => %(ttl_s)s)
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND CASE WHEN %(claim)s THEN w.state = 'starting' AND w.last_heartbeat_at IS NULL
           ELSE w.state = 'active' AND w.last_heartbeat_at = %(expected)s::timestamptz END
RETURNING {item};


-- name: wire_stop
-- Stop a work item. force: anything not yet stopped -> stopped. Graceful: active ->
-- stopping (its worker winds down and keeps its lease; poll finalizes it if the lease
-- lapses); queued or starting -> stopped outright, as nothing is in flight to wind down.
-- A row past the requested transition matches nothing (409 after the caller's read).
UPDATE work_items w
SET state = CASE WHEN %(force)s OR w.state IN {states_stop_outright} THEN 'stopped' ELSE 'stopping' END,
    outcome = CASE WHEN %(force)s OR w.state IN {states_stop_outright} THEN coalesce(w.outcome, 'stopped')
                   ELSE w.outcome END,
    stop_requested_at = coalesce(w.stop_requested_at, now()),
    stopped_at = CASE WHEN %(force)s OR w.state IN {states_stop_outright} THEN now() END,
    lease_token = CASE WHEN %(force)s OR w.state IN {states_stop_outright} THEN NULL ELSE w.lease_token END,
    lease_expires_at = CASE WHEN %(force)s OR w.state IN {states_stop_outright} THEN NULL
                            ELSE w.lease_expires_at END
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND CASE WHEN %(force)s THEN w.state <> 'stopped'
           ELSE w.state IN {states_live} END
RETURNING {item};


-- name: wire_update_metadata
-- Merge a metadata patch in one UPDATE: strings upsert, listed keys are deleted. The merge
-- reads the row it writes (re-read after any concurrent writer), so two patches never drop
-- each other's keys; the key-count ceiling is checked on the merged map, and a patch that
-- would exceed it matches nothing. Allowed in every state: metadata is not lifecycle.
UPDATE work_items w
SET metadata = (w.metadata || %(upserts)s::jsonb) - %(deletes)s::text[]
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire
  AND (SELECT count(*) FROM jsonb_object_keys((w.metadata || %(upserts)s::jsonb) - %(deletes)s::text[]))
      <= %(max_keys)s
RETURNING {item};


-- name: wire_get
-- One wire-visible work item by its current public id, and the whole seconds left on its
-- lease by the database clock (0 when it has none or it lapsed).
SELECT {item},
       CASE WHEN w.state = 'stopped' OR w.lease_expires_at IS NULL THEN 0
            ELSE greatest(0, ceil(extract(epoch FROM w.lease_expires_at - now())))::int END AS lease_seconds_left
FROM work_items w
WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire;


-- name: wire_list_page
-- Newest first by (created_at, internal id): the keyset survives id rotation because the
-- cursor never names a public id. The first page passes +infinity, so the predicate has one
-- shape and walks work_items_wire_list_idx backwards from the cursor.
SELECT {item}
FROM work_items w
WHERE w.environment_id = %(environment_id)s AND w.wire
  AND (w.created_at, w.id) < (%(before_created)s::timestamptz, %(before_id)s::bigint)
ORDER BY w.created_at DESC, w.id DESC
LIMIT %(limit)s;


-- name: wire_stats
-- Queue statistics per self_hosted environment (one, or all when environment_id is NULL):
-- depth = due queued items with no live reservation; pending = queued items under a live
-- reservation; scheduled items (run_after in the future, unreserved) count in neither;
-- oldest_queued_at over depth + pending; workers_polling = pollers seen inside the window.
-- A cloud or unknown environment yields no row (the caller reports zeros and null).
SELECT e.id, s.depth, s.pending, s.oldest_queued_at, p.workers_polling
FROM work_environments e
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE w.run_after <= now()
                              AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= now())) AS depth,
           count(*) FILTER (WHERE w.lease_expires_at > now()) AS pending,
           min(w.created_at) FILTER (WHERE w.run_after <= now() OR w.lease_expires_at > now()) AS oldest_queued_at
    FROM work_items w
    WHERE w.environment_id = e.id AND w.wire AND w.state = 'queued'
) AS s
CROSS JOIN LATERAL (
    SELECT count(*) AS workers_polling
    FROM work_pollers pl
    WHERE pl.environment_id = e.id AND pl.last_seen > now() - make_interval(secs => %(window_s)s)
) AS p
WHERE e.kind = 'self_hosted' AND (%(environment_id)s::text IS NULL OR e.id = %(environment_id)s)
ORDER BY e.id;


-- name: wire_record_poll
-- Remember that a known worker polled a self_hosted environment just now (workers_polling).
-- The same statement forgets this environment's other pollers already outside the window,
-- so the table stays bounded by recently active workers; those rows could not count anyway.
-- No row back: this worker id is new (wire_record_new_poller adds it, within the cap).
-- Relaxed when %(relaxed)s (its own transaction): a last_seen lost in a server crash only
-- makes the worker look idle a little early, and its next poll writes it again.
WITH pruned AS (
    DELETE FROM work_pollers
    WHERE environment_id = %(environment_id)s AND worker_id <> %(worker_id)s
      AND last_seen < now() - make_interval(secs => %(window_s)s)
)
UPDATE work_pollers SET last_seen = now()
WHERE environment_id = %(environment_id)s AND worker_id = %(worker_id)s
RETURNING 1, {relaxed};


-- name: wire_lock_pollers
-- Serialize the admission of new worker ids per environment (until the transaction ends), so
-- concurrent new ids cannot all see room under the cap and overshoot it.
SELECT pg_advisory_xact_lock(hashtextextended('work_pollers:' || %(environment_id)s, 0));


-- name: wire_record_new_poller
-- Add a new worker id to a self_hosted environment while fewer than max_pollers ids polled it
-- within the window (stale rows are forgotten on the way). Returns (self_hosted, added):
-- a self_hosted environment that added nothing is full.
WITH env AS (
    SELECT e.id FROM work_environments e WHERE e.id = %(environment_id)s AND e.kind = 'self_hosted'
), pruned AS (
    DELETE FROM work_pollers
    WHERE environment_id = %(environment_id)s AND last_seen < now() - make_interval(secs => %(window_s)s)
), live AS (
    SELECT count(*) AS n FROM work_pollers p
    WHERE p.environment_id = %(environment_id)s AND p.last_seen >= now() - make_interval(secs => %(window_s)s)
), added AS (
    INSERT INTO work_pollers (environment_id, worker_id, last_seen)
    SELECT env.id, %(worker_id)s, now() FROM env, live WHERE live.n < %(max_pollers)s
    ON CONFLICT (environment_id, worker_id) DO UPDATE SET last_seen = excluded.last_seen
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM env), EXISTS (SELECT 1 FROM added);
