-- Every statement the workqueue app runs by hand, named entity-first.
-- A block starts with "-- name: <name>" and runs to the next one; the comment lines
-- right under the name say what it does and why its predicate has that shape.
-- {item} expands to the column list every Item is built from (workqueue/sql/generated.py).
-- Leases are decided by the database clock only: every expiry is now() + interval.
-- State sets are never typed here: {states_live} renders workqueue/states.py's LIVE_STATES
-- (live, held, running, unsettled, ...). The work-item fragments ({item_insert:ROWS},
-- {lapsed_settle:W}, {item_lock_held:ID, TOKEN, STATES}, ...) are in fragments.sql, whose top
-- lists them all; operations/sql/queries.sql composes the same ones.


-- name: item_enqueue
-- Insert a queued item unless a live one holds (queue, key). A repeat may only raise
-- the priority and pull run_after earlier; it merges into a held item too (created=false).
-- INSERT ... SELECT ... WHERE: an unknown environment inserts nothing rather than raising,
-- so the caller's transaction survives the error. wire marks items that only Poll serves.
-- pg_notify is transactional: delivered at commit, dropped on rollback.
{item_insert:(
    SELECT %(queue)s::text AS queue, %(key)s::text AS key, e.id AS environment_id, %(priority)s::int AS priority,
           coalesce(%(run_after)s::timestamptz, now() + make_interval(secs => %(delay)s)) AS run_after,
           %(attempts)s::int AS attempts, %(max_attempts)s::int AS max_attempts, %(metadata)s::jsonb AS metadata,
           %(trace_context)s::jsonb AS trace_context,
           coalesce(e.kind = 'self_hosted' AND %(over_wire)s::bool, false) AS wire, %(group)s::text AS group_key
    FROM (SELECT 1) AS one
    LEFT JOIN work_environments e ON e.id = %(environment_id)s
    WHERE %(environment_id)s::text IS NULL OR e.id IS NOT NULL
)}
{item_merge_live}
RETURNING {item}, (xmax = 0) AS created, pg_notify(%(channel)s, w.queue);


-- name: item_enqueue_many
-- enqueue for a batch in one statement: rows come in as parallel arrays (the caller's trace
-- context, one for the whole batch, as a scalar). Duplicate keys
-- inside one batch are collapsed first (ON CONFLICT cannot touch a row twice); rows are
-- inserted in the batch's order, so ids (the claim's tie-breaker) keep FIFO. The caller
-- checks environments beforehand, so the join here only reads their kinds.
-- (ROWS keeps its ORDER BY: a sorted subquery is not flattened, so rows go in in that order.)
{item_insert:(
    SELECT b.queue, b.key, b.environment_id, b.priority, now() + make_interval(secs => b.delay) AS run_after,
           0 AS attempts, b.max_attempts, b.metadata, %(trace_context)s::jsonb AS trace_context,
           coalesce(e.kind = 'self_hosted' AND b.over_wire, false) AS wire, b.group_key
    FROM (
        SELECT DISTINCT ON (u.queue, u.key) u.*
        FROM unnest(%(queues)s::text[], %(keys)s::text[], %(environment_ids)s::text[], %(priorities)s::int[],
                    %(delays)s::float8[], %(max_attempts)s::int[], %(metadatas)s::jsonb[], %(over_wires)s::bool[],
                    %(groups)s::text[])
             WITH ORDINALITY AS u(queue, key, environment_id, priority, delay, max_attempts, metadata, over_wire,
                                  group_key, ord)
        ORDER BY u.queue, u.key, u.priority DESC, u.ord
    ) AS b
    LEFT JOIN work_environments e ON e.id = b.environment_id
    ORDER BY b.ord
)}
{item_merge_live}
RETURNING w.id, w.public_id, w.queue, w.key, (xmax = 0) AS created;


-- name: queue_notify
-- Wake idle workers of these queues at commit (enqueue_many's companion).
SELECT count(pg_notify(%(channel)s, q)) FROM unnest(%(queues)s::text[]) AS q;


-- name: queue_lock_caps
-- Serialize claims and polls per capped queue for the rest of this transaction, so the
-- count of used slots (slots_used in fragments.sql) that max_running is checked against
-- cannot move under them. Locks are taken in name order (the subquery's ORDER BY) so two
-- claimers never deadlock. Run as its own statement: the statement that counts must take
-- its snapshot after the lock is granted, to see what the previous holder committed.
SELECT count({cap_lock:q})
FROM (SELECT q FROM unnest(%(queues)s::text[]) AS q ORDER BY q) AS ordered;


-- name: queue_with_due_work
-- Which of these queues hold an item a claim could take now: queued, due and not a wire item
-- (work_items_claim_idx), or held under a lapsed lease (work_items_held_idx); one index probe
-- per queue, no lock. A claim asks it of its capped and flow-controlled queues, and leaves out
-- those with nothing to take, so that a gated queue with no work never makes a claim of the
-- other queues wait for its lock. An item arriving after this look is taken by the next claim.
SELECT u.name FROM unnest(%(queues)s::text[]) AS u(name)
WHERE EXISTS (
          SELECT 1 FROM work_items w
          WHERE w.state = 'queued' AND NOT w.wire AND w.queue = u.name AND w.run_after <= now()
      )
   OR EXISTS (
          SELECT 1 FROM work_items w
          WHERE w.state IN {states_running} AND NOT w.wire AND w.queue = u.name AND w.lease_expires_at < now()
      );


-- name: queue_names_in_families
-- The queues named PREFIX + anything, for these prefixes, that hold an item a claim may take
-- (queued and not a wire item, or held, its lease maybe lapsed): how runworker finds the
-- queues of a queue family (workqueue.worker.families), a django.tasks backend with QUEUES
-- []. Two loose index scans (one probe per distinct queue name, not one per row): the
-- distinct queues of work_items_claim_idx and of work_items_held_idx, each step the next name
-- after the last; then only the names under a prefix. Every queue with work is walked (a
-- range scan from the prefix would depend on the index's collation), and queues are few.
WITH RECURSIVE ready(name) AS (
    (SELECT w.queue FROM work_items w WHERE w.state = 'queued' AND NOT w.wire ORDER BY w.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT w.queue FROM work_items w
            WHERE w.state = 'queued' AND NOT w.wire AND w.queue > r.name
            ORDER BY w.queue LIMIT 1)
    FROM ready r WHERE r.name IS NOT NULL
),
held(name) AS (
    (SELECT w.queue FROM work_items w WHERE w.state IN {states_held} ORDER BY w.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT w.queue FROM work_items w
            WHERE w.state IN {states_held} AND w.queue > h.name
            ORDER BY w.queue LIMIT 1)
    FROM held h WHERE h.name IS NOT NULL
)
SELECT n.name FROM (SELECT name FROM ready UNION SELECT name FROM held) AS n
WHERE n.name IS NOT NULL
  AND EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) AS p(prefix) WHERE starts_with(n.name, p.prefix))
ORDER BY n.name;


-- name: item_claim
-- The in-process lane, for queues with no max_running (runworker claims relaxed: see
-- the relaxed fragment in fragments.sql; a capped queue is claimed by item_claim_capped).
-- Per queue, take the best ready items (priority, run_after, age) and items whose holder's
-- lease lapsed (reclaimed), never wire items, then the best %(limit)s of them all. A queue an
-- operator has put under flow control (flow_gated: paused or limited in work_queue_controls)
-- gets nothing here: the caller's cached view was stale, and item_claim_flow (controls.sql)
-- serves it. One lease proof is minted per claim. A lapsed item that has spent its attempts
-- is settled failed instead of handed out again, and returned so hooks can react
-- (claim_take). Rows come back in claim order, so runners start the best first
-- (claim_handed). Written for the planner: every claim is planned afresh (a custom plan: a
-- plan kept across claims would be one made when the table looked empty), so no step is
-- here that the uncapped claim does not need.
WITH q AS (
    SELECT u.name, u.lease_s, CASE WHEN {flow_gated:u.name} THEN 0 ELSE %(limit)s::int END AS n
    FROM unnest(%(queues)s::text[], %(leases)s::float8[]) AS u(name, lease_s)
),
{claim_walk:q}
candidates AS (
    SELECT * FROM (SELECT * FROM ready UNION ALL SELECT * FROM lapsed) AS b
    ORDER BY b.priority DESC, b.run_after, b.id
    LIMIT %(limit)s
),
{claim_take:candidates}
{claim_handed};


-- name: item_claim_capped
-- item_claim for claims where some queue has a max_running (the caller holds each capped
-- queue's cap_lock: queue_lock_caps): a capped queue takes no more than its free slots
-- (slots_used: holders with a live lease, plus live wire reservations on an over_wire queue),
-- and its ready and lapsed candidates share that quota (ranked per queue), since a
-- reclaimed item takes a slot too.
WITH q AS (
    SELECT u.name, u.lease_s,
           CASE WHEN {flow_gated:u.name} THEN 0
                WHEN u.cap IS NULL THEN u.n
                ELSE least(u.n, greatest(u.cap - {slots_used:u.name, u.wire}, 0))
           END AS n
    FROM unnest(%(queues)s::text[], %(limits)s::int[], %(leases)s::float8[], %(caps)s::int[], %(wires)s::bool[])
         AS u(name, n, lease_s, cap, wire)
),
{claim_walk:q}
ranked AS (
    SELECT b.*, row_number() OVER (PARTITION BY b.queue_name ORDER BY b.priority DESC, b.run_after, b.id) AS rank
    FROM (SELECT * FROM ready UNION ALL SELECT * FROM lapsed) AS b
),
candidates AS (
    SELECT * FROM ranked WHERE rank <= quota
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
),
{claim_take:candidates}
{claim_handed};


-- name: item_claim_one
-- Take one queued item, named by id, under a lease of %(lease)s seconds (the claim's take,
-- claim_take, over that one row): what workqueue.testing's factories use to build a held (or,
-- with a lease of a microsecond, a lapsed) item without claiming the queue's better items
-- first. A delayed item is taken too (run_after is not looked at); nothing comes back for an
-- item that is not queued, a wire item, or one a claim has locked.
WITH candidates AS (
    SELECT w.id, false AS lapsed, w.priority, w.run_after, w.attempts >= w.max_attempts AS spent,
           w.queue AS queue_name, 1 AS quota, %(lease)s::float8 AS lease_s
    FROM work_items w
    WHERE w.id = %(id)s AND w.state = 'queued' AND NOT w.wire
    FOR UPDATE SKIP LOCKED
),
{claim_take:candidates}
{claim_handed};


-- name: item_extend
-- Move a held item's expiry out; the proof stays. Zero rows means the lease is lost.
{item_extend_held:%(id)s, %(token)s, %(lease)s};


-- name: item_extend_many
-- The lease keeper's renewal for every item a worker holds, in one statement: a row back per
-- pair still held, (id, proof, new expiry, held = true). A row locked by another transaction
-- (often its own handler's, e.g. assert_held) is skipped rather than waited for, so one long
-- lock cannot hold up every other renewal: it comes back with no expiry (its proof still
-- matched at the statement's start), to be retried. A pair not back has lost its lease.
-- Rows are matched on (id, proof), a worker may hold an old and a new claim of one item, and
-- as in item_complete_many without a join: the pairs come sorted by proof (the store sorts
-- them, with their leases) and each row finds its pair by binary search (width_bucket). A
-- join to the unnested pairs, planned with the held rows estimated at one, read the pairs
-- again for every row: 160,000 compared for a renewal of 400 (24 ms). A renewed row comes
-- back twice (unrenewed, then with its expiry); the store keeps the expiry. The running
-- states are written as "neither unheld nor stopping" so that, as in the settle, the planner
-- cannot read work_items_held_idx end to end instead of the presented ids.
WITH p AS (SELECT %(ids)b::bigint[] AS ids, %(tokens)b::uuid[] AS tokens, %(leases)b::float8[] AS leases),
held AS (
    SELECT w.id, w.lease_token FROM work_items w, p
    WHERE {by_pkey:w, SELECT unnest(%(ids)b::bigint[])} AND {running_by_pkey:w}
      AND {presented_pair:w, p}
),
mine AS (
    SELECT w.id FROM work_items w, p
    WHERE {by_pkey:w, SELECT held.id FROM held} AND {running_by_pkey:w}
      AND {presented_pair:w, p}
    FOR UPDATE OF w SKIP LOCKED
),
renewed AS (
    UPDATE work_items w
    SET lease_expires_at = now() + make_interval(secs => p.leases[{presented_at:w, p}])
    FROM p
    WHERE {by_pkey:w, SELECT mine.id FROM mine}
    RETURNING w.id, w.lease_token, w.lease_expires_at
)
SELECT held.id, held.lease_token, NULL::timestamptz AS lease_expires_at, true AS held, {relaxed}
FROM held
UNION ALL
SELECT renewed.id, renewed.lease_token, renewed.lease_expires_at, true, {relaxed}
FROM renewed;


-- name: item_complete_many
-- Settle held items with an outcome, many at once; each row presents its own proof, so a
-- stale proof settles nothing for that row and leaves the others alone. Returns the id of
-- each row settled. Each presented id is looked up by primary key, so a settle costs its own
-- rows only. The held states are written as "not unheld" (unheld: every other state, in
-- workqueue/states.py) so the planner cannot read work_items_held_idx instead: on a table of
-- history it estimates the held rows at one, and its generic plan for this prepared
-- statement compared every held row of the fleet (and each settled row's entry not yet
-- vacuumed) with every presented id.
-- No join matches a row to its (id, proof) pair, so no plan can make that quadratic: a join
-- to the unnested pairs, planned with the held rows estimated at one (statistics taken while
-- nothing was held), ran the unnest again for every row (40,000 pairs formed per settle of
-- 200). The pairs come sorted by proof, and a row finds its pair by binary search over the
-- proofs (width_bucket), which must name the row's id too. The store sorts them, and sends an
-- old and a new claim of one item in separate statements, so an id settled names one pair.
-- The arrays travel in the binary format (%(name)b): spelling out and escaping hundreds of
-- ids and UUIDs as text cost the settler ~4 µs of CPU per item, binary ~1 µs. They are cast
-- once, in a materialized one-row p: the driver may send the ids as int4[], and a cast in the
-- WHERE (or in a subquery the planner pulls up into it) converted the whole array again for
-- every row.
WITH p AS MATERIALIZED (SELECT %(ids)b::bigint[] AS ids, %(tokens)b::uuid[] AS tokens)
UPDATE work_items w
SET state = 'stopped', outcome = %(outcome)s, stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL
FROM p
WHERE {by_pkey:w, SELECT unnest(%(ids)b::bigint[])} AND w.state NOT IN {states_unheld}
  AND {presented_pair:w, p}
RETURNING w.id;


-- name: item_retry
-- A failed attempt with attempts left: back to queued after the backoff, proof dropped. A
-- run that lost its connection counts one more loss in a row; any other failure ends the row.
UPDATE work_items
SET state = 'queued', run_after = now() + make_interval(secs => %(delay)s), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s, reclaimed = false,
    connection_losses = CASE WHEN %(connection_lost)s::bool THEN connection_losses + 1 ELSE 0 END,
    attempt_log = {attempt_ended:work_items, 'retried', %(error)s}
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {states_running}
RETURNING id;


-- name: item_fail
-- A failed attempt with no retry: settled for good with the error (and the losses in a row,
-- as item_retry counts them).
UPDATE work_items
SET state = 'stopped', outcome = 'failed', stopped_at = now(), lease_token = NULL,
    lease_expires_at = NULL, last_error = %(error)s,
    connection_losses = CASE WHEN %(connection_lost)s::bool THEN connection_losses + 1 ELSE 0 END,
    attempt_log = {attempt_ended:work_items, 'failed', %(error)s}
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {states_held}
RETURNING id;


-- name: item_requeue
-- Follow-on work found mid-run: back to queued, ready now, under the same live slot.
-- It is new work, so its attempt count starts again.
UPDATE work_items
SET state = 'queued', run_after = now(), lease_token = NULL, lease_expires_at = NULL,
    attempts = 0, reclaimed = false, connection_losses = 0,
    attempt_log = {attempt_ended:work_items, 'requeued', NULL}
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {states_running}
RETURNING id;


-- name: item_release_many
-- A graceful give-back (shutdown, refused operations begin): back to queued with the
-- attempt its claim charged refunded, run_after untouched so the order is kept. Returns the
-- ids given back. Pairs are matched as in item_complete_many (sorted by proof, a binary
-- search a row, no join; an old and a new claim of one item in separate rounds, the store's),
-- and the running states written as "neither unheld nor stopping", as in item_extend_many.
WITH p AS MATERIALIZED (SELECT %(ids)s::bigint[] AS ids, %(tokens)s::uuid[] AS tokens)
UPDATE work_items w
SET state = 'queued', attempts = greatest(w.attempts - 1, 0), lease_token = NULL,
    lease_expires_at = NULL, reclaimed = false, claimed_by = '',
    attempt_log = {attempt_ended:w, 'released', NULL}
FROM p
WHERE {by_pkey:w, SELECT unnest(%(ids)s::bigint[])} AND {running_by_pkey:w}
  AND {presented_pair:w, p}
RETURNING w.id;


-- name: item_release_lost_connection
-- A run whose database connection died under it (a server restart, a killed backend, an
-- idle-in-transaction timeout): back to queued with the attempt refunded, like a graceful
-- release, one more loss in a row counted (the worker refunds WORKQUEUE["CONNECTION_LOSS_
-- REFUNDS"] of them; item_connection_losses reads the count) and the loss in last_error.
UPDATE work_items
SET state = 'queued', attempts = greatest(attempts - 1, 0), lease_token = NULL,
    lease_expires_at = NULL, reclaimed = false, claimed_by = '', last_error = %(error)s,
    connection_losses = connection_losses + 1,
    attempt_log = {attempt_ended:work_items, 'connection lost', %(error)s}
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {states_running}
RETURNING id;


-- name: item_connection_losses
-- How many runs in a row of a held item lost their database connection (nothing if the proof
-- is stale): read only when a run has just lost its connection, never on the hot path.
SELECT connection_losses FROM work_items
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {states_running};


-- name: item_stop_reason
-- Why a holder lost its proof, asked once a renewal found it gone (never on the renewals'
-- path): cancelled (cancel_key, force stop) or wound down by a graceful stop →
-- cancel_requested; failed by the reaper past its hard_timeout (item_fail_hard_timeout's
-- last_error) → timeout; anything else (another claim since ours, the row gone) →
-- lease_lost. attempts = ours: nobody has claimed the item since (a claim charges one), so
-- the stop was of our claim, not of a later holder's.
SELECT CASE
    WHEN w.attempts <> %(attempts)s THEN 'lease_lost'
    WHEN w.state = 'stopped' AND w.outcome = 'cancelled' THEN 'cancel_requested'
    WHEN w.state = 'stopping' AND w.lease_token = %(token)s THEN 'cancel_requested'
    WHEN w.state = 'stopped' AND w.outcome = 'failed' AND w.last_error LIKE 'hard timeout:%%' THEN 'timeout'
    ELSE 'lease_lost'
END
FROM work_items w
WHERE w.id = %(id)s;


-- name: item_assert_held
-- Lock the row in the caller's transaction if the proof still matches.
{item_lock_held:%(id)s, %(token)s, {states_held}};


-- name: item_cancel_key
-- An interrupt: every live or stopping item for the key goes straight to stopped
-- (cancelled) in the caller's transaction, so a re-enqueue in the same transaction makes a
-- new item. No proof: the holder's next proof-bearing write fails instead.
UPDATE work_items AS w
SET state = 'stopped', outcome = 'cancelled', stopped_at = now(),
    stop_requested_at = coalesce(stop_requested_at, now()), lease_token = NULL, lease_expires_at = NULL,
    attempt_log = CASE WHEN w.state IN {states_held} THEN {attempt_ended:w, 'cancelled', NULL} ELSE w.attempt_log END
WHERE w.key = %(key)s AND {unsettled_keyed:w}
  AND (%(queue)s::text IS NULL OR w.queue = %(queue)s)
RETURNING {item};


-- name: item_force_stop
-- Operator's force stop of chosen items (admin): any unsettled item → stopped, cancelled.
UPDATE work_items AS w
SET state = 'stopped', outcome = 'cancelled', stopped_at = now(),
    stop_requested_at = coalesce(stop_requested_at, now()), lease_token = NULL, lease_expires_at = NULL,
    attempt_log = CASE WHEN w.state IN {states_held} THEN {attempt_ended:w, 'force stopped', NULL} ELSE w.attempt_log END
WHERE id = ANY(%(ids)s::bigint[]) AND state <> 'stopped'
RETURNING {item};


-- name: item_requeue_now
-- Operator's "requeue now" (admin): queued, starting or active items become ready at once.
-- Handing a held item back revokes its holder (proof cleared); a wire item that was handed
-- out gets a fresh public id so its old holder's calls hit 404.
UPDATE work_items AS w
SET state = 'queued', run_after = now(), lease_token = NULL, lease_expires_at = NULL,
    reclaimed = false, acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL,
    public_id = CASE WHEN handed_out THEN work_mint_id('work_') ELSE public_id END,
    attempt_log = CASE WHEN w.state IN {states_held} THEN {attempt_ended:w, 'requeued by an operator', NULL}
                       ELSE w.attempt_log END
WHERE id = ANY(%(ids)s::bigint[]) AND state IN {states_live}
RETURNING {item};


-- name: item_finalize_stopping
-- Recover: a stopping item whose lease lapsed has nobody left to finish it; settle it.
-- SKIP LOCKED and a bound keep the sweep cheap and concurrent-safe.
UPDATE work_items w
SET state = 'stopped', outcome = coalesce(w.outcome, 'stopped'), stopped_at = now(),
    lease_token = NULL, lease_expires_at = NULL
FROM (
    SELECT id FROM work_items
    WHERE state = 'stopping' AND (lease_expires_at IS NULL OR lease_expires_at < coalesce(%(now)s, now()))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS s
WHERE w.id = s.id
RETURNING {item};


-- name: item_requeue_lapsed
-- Recover: wire items acked (starting) or heartbeating (active) whose lease lapsed go back
-- to queued under a fresh public id; one that has spent its attempts is failed instead.
UPDATE work_items w
SET {lapsed_settle:w},
    public_id = CASE WHEN {lapsed_spent:w} THEN w.public_id ELSE work_mint_id('work_') END,
    acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL
FROM (
    SELECT id FROM work_items
    WHERE state IN {states_running} AND wire AND lease_expires_at < coalesce(%(now)s, now())
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS s
WHERE w.id = s.id
RETURNING {item};


-- name: item_fail_hard_timeout
-- Reap: a held item running longer than its queue's hard_timeout (from this attempt's
-- started_at) is failed for good; clearing the proof tells the holder at its next renewal
-- (item_stop_reason reads "hard timeout:" in last_error as the reason: keep the prefix).
WITH t AS (
    SELECT * FROM unnest(%(queues)s::text[], %(timeouts)s::float8[]) AS t(queue, timeout_s)
),
victims AS (
    SELECT v.id, t.timeout_s FROM t CROSS JOIN LATERAL (
        SELECT h.id FROM work_items h
        WHERE h.queue = t.queue AND h.state IN {states_held}
          AND h.started_at < coalesce(%(now)s, now()) - make_interval(secs => t.timeout_s)
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS v
)
UPDATE work_items w
SET state = 'stopped', outcome = 'failed', stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
    last_error = format('hard timeout: held longer than %%s s', v.timeout_s),
    attempt_log = {attempt_ended:w, 'timed out', format('hard timeout: held longer than %%s s', v.timeout_s)}
FROM victims v
WHERE w.id = v.id
RETURNING {item};


-- name: item_reap_stopped
-- Reap: delete stopped items older than their queue's retention, a bounded batch at a time,
-- oldest first. The shortest retention of all (min_retention) bounds a range scan of
-- work_items_stopped_idx, so a sweep reads the rows past retention and stops there: without
-- that bound the per-queue retention is not an index condition, and a sweep that finds less
-- than a batch reads every stopped row in the table (the whole history) to look for more.
-- id = ANY(ARRAY(...)): the batch is collected first, then deleted by primary key.
DELETE FROM work_items
WHERE id = ANY(ARRAY(
    SELECT w.id FROM work_items w
    WHERE w.state = 'stopped'
      AND w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => %(min_retention)s)
      AND w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => coalesce(
              (SELECT r.retention_s
               FROM unnest(%(queues)s::text[], %(retentions)s::float8[]) AS r(queue, retention_s)
               WHERE r.queue = w.queue),
              %(default_retention)s))
    ORDER BY w.stopped_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
));


-- name: poller_prune
-- Reap: forget wire pollers not seen within the polling window.
DELETE FROM work_pollers WHERE last_seen < coalesce(%(now)s, now()) - make_interval(secs => %(window)s);


-- name: worker_beat
-- A runworker process says it is alive (and what it serves); inserted on first beat.
INSERT INTO work_workers AS k (id, host, pid, queues, started_at, last_seen, state, processed, failed, pool)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, now(), now(), %(state)s, %(processed)s, %(failed)s, %(pool)s)
ON CONFLICT (id) DO UPDATE
SET last_seen = now(), state = excluded.state, queues = excluded.queues, host = excluded.host,
    pid = excluded.pid, processed = excluded.processed, failed = excluded.failed, pool = excluded.pool;


-- name: maintenance_runs_prune
-- Reap: forget sweep records older than the window (the dashboard reads the latest only).
DELETE FROM work_maintenance_runs WHERE started_at < coalesce(%(now)s, now()) - make_interval(secs => %(older_than)s);


-- name: worker_forget_stale
-- Reap: drop worker rows not seen for a long while (they stay visible as stale until then).
DELETE FROM work_workers WHERE last_seen < coalesce(%(now)s, now()) - make_interval(secs => %(older_than)s);


-- name: maintenance_try_lock
-- One sweep of a kind at a time across hosts: a transaction-scoped advisory lock, not waited
-- for (released at commit, so it works behind a transaction-mode pooler too).
SELECT pg_try_advisory_xact_lock(hashtextextended(%(name)s, 0));


-- name: schedule_take_due
-- The firing pass: take a bounded batch of due schedules, oldest slot first, locking each
-- row for the rest of the transaction. SKIP LOCKED: a schedule another worker (or a
-- `schedules tick`) is firing right now is left to it; the row lock plus the last_slot
-- advanced in the same transaction is what makes a slot fire once. "now" is passed in so
-- tests pin the clock; the statement returns the "now" it used.
SELECT s.id, s.name, s.target, s.queue, s.key_prefix, s.metadata, s.priority, s.kind, s.request, s.task,
       s.args, s.cron, s.every, s.timezone, s.misfire, s.last_slot, s.next_slot,
       coalesce(%(now)s::timestamptz, now()) AS now
FROM work_schedules s
WHERE s.enabled AND s.removed_at IS NULL
  AND s.next_slot <= coalesce(%(now)s::timestamptz, now())
ORDER BY s.next_slot, s.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;


-- name: schedule_advance_many
-- Record what a pass fired, for the rows it holds locked: last_slot only ever moves forward
-- (greatest), so a slot at or before it can never fire again, whatever happens to the items.
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


-- name: schedule_next_due
-- Seconds until the earliest active schedule is due (negative: overdue; NULL: none), so the
-- scheduler loop sleeps exactly that long.
SELECT extract(epoch FROM min(next_slot) - coalesce(%(now)s::timestamptz, now()))::float8
FROM work_schedules
WHERE enabled AND removed_at IS NULL;


-- name: schedule_notify
-- Wake every scheduler loop at commit (a schedule was added, changed, resumed). The payload
-- starts with '#', which no queue name can, so claim loops ignore it.
SELECT pg_notify(%(channel)s, '#schedules');


-- name: schedule_sync_lock
-- One settings sync at a time (workers starting together, migrate): transaction-scoped.
SELECT pg_advisory_xact_lock(hashtextextended('workqueue.schedules.sync', 0));
