-- Flow control: the operators' runtime queue controls (work_queue_controls) and the claim
-- that enforces them with the settings' limits (workqueue/controls.py).
-- Every limit is decided here, under the queue's transaction-scoped advisory lock
-- (queue_lock_caps, taken by the caller just before), by counting what is really held: live
-- leases (and live wire reservations) for max_running and max_running_per_group, starts in a
-- sliding window (work_queue_starts) for rate and rate_per_group. Nothing is a counter that
-- must be released, so a dead worker's lapsed lease frees its slot by itself.
-- A NULL override means "use the setting": coalesce(control, setting) throughout.


-- name: queue_controls_all
-- Every controls row (the cache that picks the claim path, the dashboard, `queues list`).
SELECT c.queue, c.paused, c.max_running, c.max_running_per_group, c.rate_count, c.rate_period,
       c.rate_per_group_count, c.rate_per_group_period, c.updated_at, c.updated_by
FROM work_queue_controls c
ORDER BY c.queue;


-- name: queue_controls_write
-- Create or change one queue's controls; only the fields named in %(fields)s are written
-- (the others keep their value, NULL for a new row). Idle workers of the queue wake at commit
-- (its name), and every process drops its cached view ('#controls').
INSERT INTO work_queue_controls AS c (
    queue, paused, max_running, max_running_per_group, rate_count, rate_period,
    rate_per_group_count, rate_per_group_period, updated_at, updated_by
)
VALUES (%(queue)s, coalesce(%(paused)s, false), %(max_running)s, %(max_running_per_group)s, %(rate_count)s,
        %(rate_period)s, %(rate_per_group_count)s, %(rate_per_group_period)s, now(), %(by)s)
ON CONFLICT (queue) DO UPDATE
SET paused = CASE WHEN 'paused' = ANY (%(fields)s::text[]) THEN excluded.paused ELSE c.paused END,
    max_running = CASE WHEN 'max_running' = ANY (%(fields)s::text[]) THEN excluded.max_running
                       ELSE c.max_running END,
    max_running_per_group = CASE WHEN 'max_running_per_group' = ANY (%(fields)s::text[])
                                 THEN excluded.max_running_per_group ELSE c.max_running_per_group END,
    rate_count = CASE WHEN 'rate' = ANY (%(fields)s::text[]) THEN excluded.rate_count ELSE c.rate_count END,
    rate_period = CASE WHEN 'rate' = ANY (%(fields)s::text[]) THEN excluded.rate_period ELSE c.rate_period END,
    rate_per_group_count = CASE WHEN 'rate_per_group' = ANY (%(fields)s::text[])
                                THEN excluded.rate_per_group_count ELSE c.rate_per_group_count END,
    rate_per_group_period = CASE WHEN 'rate_per_group' = ANY (%(fields)s::text[])
                                 THEN excluded.rate_per_group_period ELSE c.rate_per_group_period END,
    updated_at = now(),
    updated_by = excluded.updated_by
RETURNING c.queue, c.paused, c.max_running, c.max_running_per_group, c.rate_count, c.rate_period,
          c.rate_per_group_count, c.rate_per_group_period, c.updated_at, c.updated_by,
          pg_notify(%(channel)s, c.queue), pg_notify(%(channel)s, '#controls');


-- name: queue_starts_prune
-- Reap: forget starts older than the longest rate period (an hour); the claim prunes its own
-- queue's window as it goes, this catches queues whose rate was removed.
DELETE FROM work_queue_starts WHERE started_at < coalesce(%(now)s, now()) - make_interval(secs => %(older_than)s);


-- name: item_claim_flow
-- item_claim for queues under flow control (a controls row, or a per-group or rate limit in
-- the settings): the same order, lapsed-lease reclaim and spent-attempt settling, with
-- every limit decided in the statement. Per queue: paused takes nothing; the quota is the
-- least of what was asked, the free max_running slots and the rate's room in its window.
-- Groups with no room (groups_full) are skipped in the index walk itself, so a saturated
-- group never blocks the others behind it; the walk looks a few times past the quota when
-- per-group limits apply, and each remaining group takes no more than its room
-- (group_room). Items held back stay queued, untouched: no attempt is charged. Each start
-- of a rate-limited queue is logged in work_queue_starts, and the queue's expired window
-- rows are pruned, in the same statement. The take (claim_take) and the rows handed back
-- (claim_handed) are item_claim's own.
WITH u AS (
    SELECT u.name, u.n AS asked, u.lease_s, u.wire,
           {flow_limits:c, u}
    FROM unnest(%(queues)s::text[], %(limits)s::int[], %(leases)s::float8[], %(caps)s::int[], %(wires)s::bool[],
                %(group_caps)s::int[], %(rate_ns)s::int[], %(rate_ss)s::float8[], %(group_rate_ns)s::int[],
                %(group_rate_ss)s::float8[])
         AS u(name, n, lease_s, cap, wire, group_cap, rate_n, rate_s, group_rate_n, group_rate_s)
    LEFT JOIN work_queue_controls c ON c.queue = u.name
),
q AS (
    SELECT u.*, lim.n,
           CASE WHEN lim.n = 0 THEN 0
                WHEN u.group_cap IS NULL AND u.group_rate_n IS NULL THEN lim.n
                ELSE lim.n * 4 + 8 END AS scan,
           CASE WHEN lim.n = 0 THEN '{}'::text[] ELSE {groups_full:u} END AS blocked
    FROM u CROSS JOIN LATERAL (
        SELECT CASE WHEN u.paused THEN 0 ELSE least(
                   u.asked,
                   CASE WHEN u.cap IS NOT NULL THEN greatest(u.cap - {slots_used:u.name, u.wire}, 0) END,
                   CASE WHEN u.rate_n IS NOT NULL
                        THEN greatest(u.rate_n - {starts_used:u.name, u.rate_s, u.wire}, 0) END
               )::int END AS n
    ) AS lim
),
ready AS (
    SELECT c.*, q.name AS queue_name, q.n AS quota, q.lease_s FROM q CROSS JOIN LATERAL (
        SELECT w.id, false AS lapsed, w.priority, w.run_after, w.attempts >= w.max_attempts AS spent, w.group_key
        FROM work_items w
        WHERE w.state = 'queued' AND NOT w.wire AND w.queue = q.name AND w.run_after <= now()
          AND (w.group_key IS NULL OR w.group_key <> ALL (q.blocked))
        ORDER BY w.priority DESC, w.run_after, w.id
        LIMIT q.scan
        FOR UPDATE SKIP LOCKED
    ) AS c
),
lapsed AS (
    SELECT c.*, q.name AS queue_name, q.n AS quota, q.lease_s FROM q CROSS JOIN LATERAL (
        SELECT w.id, true AS lapsed, w.priority, w.run_after, {lapsed_spent:w} AS spent, w.group_key
        FROM work_items w
        WHERE w.state IN {states_running} AND NOT w.wire AND w.queue = q.name
          AND w.lease_expires_at < now()
          AND (w.group_key IS NULL OR w.group_key <> ALL (q.blocked))
        ORDER BY w.lease_expires_at
        LIMIT q.scan
        FOR UPDATE SKIP LOCKED
    ) AS c
),
found AS (
    SELECT * FROM ready UNION ALL SELECT * FROM lapsed
),
held_groups AS (
    SELECT q.name AS queue_name, hg.group_key, hg.held
    FROM q CROSS JOIN LATERAL ({groups_held:q}) AS hg
    WHERE q.group_cap IS NOT NULL
),
rooms AS (
    SELECT g.queue_name, g.group_key,
           {group_room:q, g.group_key, coalesce(hg.held, 0)} AS room
    FROM (SELECT DISTINCT f.queue_name, f.group_key FROM found f WHERE f.group_key IS NOT NULL) AS g
    JOIN q ON q.name = g.queue_name
    LEFT JOIN held_groups hg ON hg.queue_name = g.queue_name AND hg.group_key = g.group_key
    WHERE q.group_cap IS NOT NULL OR q.group_rate_n IS NOT NULL
),
fitting AS (
    SELECT f.*, r.room,
           row_number() OVER (PARTITION BY f.queue_name, f.group_key ORDER BY f.priority DESC, f.run_after, f.id)
               AS group_rank
    FROM found f LEFT JOIN rooms r ON r.queue_name = f.queue_name AND r.group_key = f.group_key
),
ranked AS (
    SELECT f.*, row_number() OVER (PARTITION BY f.queue_name ORDER BY f.priority DESC, f.run_after, f.id) AS rank
    FROM fitting f
    WHERE f.room IS NULL OR f.group_rank <= f.room
),
candidates AS (
    SELECT * FROM ranked WHERE rank <= quota
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
),
{claim_take:candidates},
started AS (
    INSERT INTO work_queue_starts (queue, group_key, started_at)
    SELECT c.queue_name, c.group_key, now()
    FROM candidates c JOIN q ON q.name = c.queue_name
    WHERE NOT (c.lapsed AND c.spent) AND (q.rate_n IS NOT NULL OR q.group_rate_n IS NOT NULL)
),
pruned AS (
    DELETE FROM work_queue_starts s
    USING q
    WHERE s.queue = q.name AND (q.rate_n IS NOT NULL OR q.group_rate_n IS NOT NULL)
      AND s.started_at < now() - make_interval(secs => greatest(coalesce(q.rate_s, 0), coalesce(q.group_rate_s, 0)))
)
{claim_handed};


-- name: queue_flow_wait
-- After a flow claim that took nothing: seconds until it is worth looking again, for the
-- queues that have due work waiting. A rate frees its next start when the oldest start in
-- its window leaves it; a cap when a holder finishes (%(recheck)s, as nothing announces
-- that). Paused queues wait for the resume's NOTIFY. NULL: nothing is waiting on a limit.
SELECT min(CASE
           WHEN coalesce(c.paused, false) THEN NULL
           WHEN coalesce(c.rate_count, u.rate_n) IS NOT NULL
                AND (SELECT count(*) FROM work_queue_starts s WHERE s.queue = u.name
                       AND s.started_at > now() - make_interval(secs => coalesce(c.rate_period, u.rate_s)))
                    >= coalesce(c.rate_count, u.rate_n)
           THEN greatest(extract(epoch FROM (
                    SELECT min(s.started_at) FROM work_queue_starts s WHERE s.queue = u.name
                      AND s.started_at > now() - make_interval(secs => coalesce(c.rate_period, u.rate_s))
                ) + make_interval(secs => coalesce(c.rate_period, u.rate_s)) - now())::float8, 0.01)
           ELSE %(recheck)s::float8 END)
FROM unnest(%(queues)s::text[], %(rate_ns)s::int[], %(rate_ss)s::float8[]) AS u(name, rate_n, rate_s)
LEFT JOIN work_queue_controls c ON c.queue = u.name
WHERE EXISTS (
    SELECT 1 FROM work_items w
    WHERE w.state = 'queued' AND NOT w.wire AND w.queue = u.name AND w.run_after <= now()
);


-- name: item_retry_now_many
-- Operator's bulk "retry now" (admin): failed items get a new run at once: queued, due now,
-- attempts reset, no outcome. The old error stays in last_error, under a line that says an
-- operator retried it. A failed item whose (queue, key) already has a live item is left
-- alone (the live one is the newer request), and of several failed items of one key only the
-- newest is retried, so the one-live-item-per-key rule holds. A handed-out wire item gets a
-- fresh public id, so its old holder's calls hit 404.
UPDATE work_items AS w
SET state = 'queued', outcome = NULL, attempts = 0, run_after = now(), stopped_at = NULL,
    stop_requested_at = NULL, lease_token = NULL, lease_expires_at = NULL, reclaimed = false,
    acknowledged_at = NULL, started_at = NULL, last_heartbeat_at = NULL, claimed_by = '',
    last_error = 'retried now by an operator; the previous error was:' || chr(10) || w.last_error,
    public_id = CASE WHEN w.handed_out THEN work_mint_id('work_') ELSE w.public_id END
FROM (
    SELECT DISTINCT ON (f.queue, f.key) f.id
    FROM work_items f
    WHERE f.id = ANY (%(ids)s::bigint[]) AND f.state = 'stopped' AND f.outcome = 'failed'
      AND NOT EXISTS (
          SELECT 1 FROM work_items l
          WHERE l.queue = f.queue AND l.key = f.key AND l.state IN {states_live}
      )
    ORDER BY f.queue, f.key, f.id DESC
) AS pick
WHERE w.id = pick.id AND w.state = 'stopped' AND w.outcome = 'failed'
RETURNING w.id, pg_notify(%(channel)s, w.queue);


-- name: item_run_now_many
-- Operator's bulk "run now" (admin): scheduled items (queued, run_after ahead) become due now.
UPDATE work_items AS w
SET run_after = now()
WHERE w.id = ANY (%(ids)s::bigint[]) AND w.state = 'queued' AND w.run_after > now()
RETURNING w.id, pg_notify(%(channel)s, w.queue);


-- name: queue_flow_blocked
-- Before a poll, under the per-queue locks of the wire queues under flow control: the queues
-- that may hand nothing out (paused, max_running full, rate spent: reservations count, each
-- one ack away from a slot and a start), and the groups with no room, as queue || chr(31) ||
-- group. One row: (blocked queues, blocked groups).
WITH u AS (
    SELECT u.name, true AS wire,
           {flow_limits:c, u}
    FROM unnest(%(queues)s::text[], %(caps)s::int[], %(group_caps)s::int[], %(rate_ns)s::int[],
                %(rate_ss)s::float8[], %(group_rate_ns)s::int[], %(group_rate_ss)s::float8[])
         AS u(name, cap, group_cap, rate_n, rate_s, group_rate_n, group_rate_s)
    LEFT JOIN work_queue_controls c ON c.queue = u.name
),
v AS (
    SELECT u.name,
           u.paused
           OR (u.cap IS NOT NULL AND {slots_used:u.name, true} >= u.cap)
           OR (u.rate_n IS NOT NULL AND {starts_used:u.name, u.rate_s, true} >= u.rate_n) AS blocked,
           CASE WHEN u.group_cap IS NULL AND u.group_rate_n IS NULL THEN '{}'::text[]
                ELSE {groups_full:u} END AS groups
    FROM u
)
SELECT coalesce(array_agg(v.name) FILTER (WHERE v.blocked), '{}'::text[]),
       coalesce((SELECT array_agg(v2.name || chr(31) || g) FROM v AS v2 CROSS JOIN unnest(v2.groups) AS g), '{}'::text[])
FROM v;


-- name: item_ack_flow_check
-- Before an ack of an item of a wire queue under flow control, under that queue's lock
-- (wire_ack_lock): may it start now? Its own live reservation already counts in every figure
-- (slots, starts, its group), so it is taken back out. One row (queue, paused, has_slot,
-- has_rate, has_group_room) for a queued item; none otherwise (wire_ack answers those).
WITH f AS (
    SELECT w.id, w.queue AS name, true AS wire, w.group_key,
           CASE WHEN w.lease_expires_at > now() THEN 1 ELSE 0 END AS own,
           {flow_limits:c, u}
    FROM work_items w
    JOIN unnest(%(queues)s::text[], %(caps)s::int[], %(group_caps)s::int[], %(rate_ns)s::int[],
                %(rate_ss)s::float8[], %(group_rate_ns)s::int[], %(group_rate_ss)s::float8[])
         AS u(name, cap, group_cap, rate_n, rate_s, group_rate_n, group_rate_s) ON u.name = w.queue
    LEFT JOIN work_queue_controls c ON c.queue = w.queue
    WHERE w.public_id = %(work_id)s AND w.environment_id = %(environment_id)s AND w.wire AND w.state = 'queued'
)
SELECT f.name, f.paused,
       f.cap IS NULL OR {slots_used:f.name, true} - f.own < f.cap AS has_slot,
       f.rate_n IS NULL OR {starts_used:f.name, f.rate_s, f.wire} - f.own < f.rate_n AS has_rate,
       f.group_key IS NULL OR coalesce({group_room:f, f.group_key, {group_held:f, f.group_key}} + f.own >= 1, true) AS has_group_room,
       f.rate_n IS NOT NULL OR f.group_rate_n IS NOT NULL AS rated
FROM f;


-- name: queue_start_record
-- A wire ack of an item of a rate-limited queue: log the start in the rate's window (the
-- caller holds the queue's lock, and commits this with the ack).
INSERT INTO work_queue_starts (queue, group_key, started_at)
SELECT w.queue, w.group_key, now() FROM work_items w WHERE w.id = %(id)s;


-- name: queue_depths
-- Due items waiting per queue (WorkItemQuerySet.ready(): queued, due, not reserved by a live
-- poll), for `queues list`. Reads the queued rows only.
SELECT w.queue, count(*)
FROM work_items w
WHERE w.state = 'queued' AND w.run_after <= now() AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= now())
GROUP BY w.queue;
