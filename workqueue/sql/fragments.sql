-- The work-item fragments: pieces of SQL that write (or lock, or count) work_items, composed
-- into the statements of workqueue/sql/*.sql and operations/sql/queries.sql, so every write to
-- a work item is authored here or in a workqueue statement.
--
-- A block starts with "-- fragment: <name>(<args>)" and runs to the next one. A statement
-- calls it as {name:arg1, arg2} (arguments are SQL text, split on the commas outside
-- parentheses, brackets, braces and quotes); each $arg in the block is replaced by its
-- argument. A fragment without arguments is written {name}. Fragments may use fragments
-- (each is expanded once, when the files load); `manage.py sqlshow NAME` prints a statement
-- or a fragment expanded. The generated fragments (workqueue/sql/generated.py):
--   {item} / {claimed}      the column lists an Item is read from (alias w)
--   {states_NAME}           a named state set of workqueue/states.py: live, held, running,
--                           unheld, unsettled, stop_outright, all -> ('queued', 'starting', ...)
--   {outcomes_NAME}         a named outcome set: charted, all
--
-- Fragments here:
--   {relaxed}                               the relaxed-commit output column
--   {item_insert:ROWS}                      INSERT a queued item per row of ROWS
--   {item_merge_live} / {item_skip_live}    its ON CONFLICT tail on the live (queue, key)
--   {lapsed_spent:W}                        whether lapsed item W spent its attempts
--   {lapsed_error:ATTEMPTS, MAX_ATTEMPTS}   the one last_error of a lapsed, spent item
--   {lapsed_settle:W}                       the SET list deciding a lapsed lease
--   {attempt_ended:W, OUTCOME, ERROR}       W's attempt_log with the attempt that ended appended
--   {item_extend_held:ID, TOKEN, LEASE_S}   move a running item's lease (proof checked)
--   {item_lock_held:ID, TOKEN, STATES}      lock the item if the proof matches
--   {unsettled_keyed:W}                     W is unsettled (work_items_unsettled_keyed_idx's rows)
--   {item_lock_key:KEY}                     lock every unsettled item of a key
--   {item_lock_keys:KEYS}                   lock every unsettled item of many keys
--   {item_cancel_keys:SOURCE, KEY}          stop (cancelled) every unsettled item of SOURCE's keys
--   {item_live_for:QUEUE, KEY}              whether a live item exists (a boolean)
--   {item_settle:SOURCE, ID, OUTCOME, ERROR}        settle an item for a holder's write
--   {item_retry_after:SOURCE, ID, DELAY_S, ERROR}   back to queued after the delay
--   {item_stop_refunded:ID, TOKEN}          settle as a no-op, refunding the claim's attempt
--   {item_wait_until:SOURCE, ID, RUN_AFTER} back to queued until RUN_AFTER, refunding the claim's attempt
--   {item_due_now:SOURCE, KEY}              make the queued items of SOURCE's keys due now
--   {cap_lock:QUEUE}                        the per-queue max_running advisory lock
--   {slots_used:QUEUE, WIRE}                what counts against max_running
--   {starts_used:QUEUE, SECONDS, WIRE}      what counts against a rate
--   {flow_gated:QUEUE}                      whether a controls row puts the queue under flow control
--   {flow_limits:C, U}                      a queue's effective flow limits (controls over settings)
--   {groups_held:Q}                         a queue's groups and how many slots each holds
--   {groups_full:Q}                         a queue's groups with no room left
--   {group_held:Q, GROUP}                   what one group holds (groups_held for one)
--   {group_room:Q, GROUP, HELD}             how many more items of a group may start
--   {flow_wire_gate:R}                      a wire poll's candidate passes the flow checks
--   {claim_walk:Q}                          a claim's ready and lapsed walks, per queue row of Q
--   {claim_take:CANDIDATES}                 a claim's take: hand out or settle each candidate
--   {claim_handed}                          a claim's result rows, in claim order
--   {by_pkey:W, IDS}                        reach rows W by primary key, whatever the planner estimates
--   {presented_at:W, P} / {presented_pair:W, P}   W's (id, proof) pair among those presented in P
--   {running_by_pkey:W}                     W is running, in a form work_items_held_idx cannot serve


-- fragment: relaxed()
-- An extra output column that, when %(relaxed)s is true, lets this statement's transaction
-- commit without waiting for its WAL to reach disk (synchronous_commit = off, transaction-
-- local). Only for soft transitions that are safe to lose in a server crash: a claim, a
-- lease renewal, an operation's begin or progress. Losing one reverts the row to a state the
-- queue already recovers from, and since WAL is written in order, any later durable commit
-- (the handler's own writes, the completion) makes it durable too. Enqueue, completion,
-- failure and every terminal write stay synchronous.
(SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit


-- fragment: item_insert(rows)
-- Insert one queued item per row of ROWS, a parenthesised SELECT with the columns queue,
-- key, environment_id, priority, run_after, attempts, max_attempts, metadata,
-- trace_context, wire, group_key (typed: cast parameters). Follow it with an ON CONFLICT
-- tail below.
INSERT INTO work_items AS w (
    public_id, queue, key, environment_id, state, priority, run_after, attempts, max_attempts,
    metadata, trace_context, wire, reclaimed, handed_out, created_at, group_key
)
SELECT work_mint_id('work_'), r.queue, r.key, r.environment_id, 'queued', r.priority, r.run_after, r.attempts,
       r.max_attempts, r.metadata, r.trace_context, r.wire, false, false, now(), r.group_key
FROM $rows AS r


-- fragment: item_merge_live()
-- A repeat while a live item holds (queue, key) merges into it: priority only rises,
-- run_after only moves earlier. The predicate is exactly work_items_live_key_uniq's.
ON CONFLICT (queue, key) WHERE state IN {states_live}
DO UPDATE SET priority = greatest(w.priority, excluded.priority),
              run_after = least(w.run_after, excluded.run_after)


-- fragment: item_skip_live()
-- A live item already holds (queue, key): insert nothing.
ON CONFLICT (queue, key) WHERE state IN {states_live} DO NOTHING


-- fragment: lapsed_spent(w)
-- Whether the item W (a work_items row alias), whose lease lapsed, has spent its attempts.
($w.attempts >= $w.max_attempts)


-- fragment: lapsed_error(attempts, max_attempts)
-- The one last_error of an item whose lease lapsed after its attempts were spent.
format(
    'lease lapsed on attempt %%s of %%s (the holder died or stalled); attempts are spent, so it is not retried',
    $attempts, $max_attempts
)


-- fragment: lapsed_settle(w)
-- The decision for an item W whose holder's lease lapsed, as an UPDATE's SET list: with
-- attempts left it goes back to queued (ready as it was: no backoff, the attempt was not a
-- failure of the handler); spent, it is stopped failed with lapsed_error. Either way the
-- lease and its proof are dropped and it is marked reclaimed. Claim, poll and recover use
-- it (claim and poll only for spent items: they hand the others out again at once).
state = CASE WHEN {lapsed_spent:$w} THEN 'stopped' ELSE 'queued' END,
outcome = CASE WHEN {lapsed_spent:$w} THEN 'failed' END,
stopped_at = CASE WHEN {lapsed_spent:$w} THEN now() END,
last_error = CASE WHEN {lapsed_spent:$w}
                  THEN {lapsed_error:$w.attempts, $w.max_attempts}
                  ELSE $w.last_error END,
lease_token = NULL, lease_expires_at = NULL, reclaimed = true,
attempt_log = {attempt_ended:$w, 'lease lapsed', NULL}


-- fragment: attempt_ended(w, outcome, error)
-- The attempt_log of item W (a work_items row alias, read before the write) with the attempt
-- that just ended appended: its number, holder, start, end, OUTCOME and ERROR (NULL: none).
-- Only the statements that end an attempt otherwise than by success write it, each in the
-- UPDATE that already ends the attempt: a success is the row itself (attempts, claimed_by,
-- started_at, stopped_at), so the settle of the hot path writes nothing more. The oldest
-- entry is dropped once there are 20: an item retried forever keeps a bounded log.
(CASE WHEN jsonb_array_length($w.attempt_log) >= 20 THEN $w.attempt_log - 0 ELSE $w.attempt_log END)
|| jsonb_build_array(jsonb_build_object(
       'attempt', $w.attempts, 'worker', $w.claimed_by, 'started_at', $w.started_at, 'ended_at', now(),
       'outcome', $outcome::text, 'error', $error::text))


-- fragment: item_extend_held(id, token, lease_s)
-- Move a running item's expiry out by LEASE_S seconds if TOKEN is still its proof; returns
-- the new expiry (no row: the lease is lost).
UPDATE work_items AS w SET lease_expires_at = now() + make_interval(secs => $lease_s)
WHERE w.id = $id AND w.lease_token = $token AND w.state IN {states_running}
RETURNING w.lease_expires_at


-- fragment: item_lock_held(id, token, states)
-- Lock the item for the rest of the transaction if TOKEN is still its proof and its state
-- is in the state set STATES ({states_running} or {states_held}); returns its id.
SELECT w.id FROM work_items AS w
WHERE w.id = $id AND w.lease_token = $token AND w.state IN $states
FOR UPDATE


-- fragment: unsettled_keyed(w)
-- W (an alias of work_items) is not stopped yet: the predicate of
-- work_items_unsettled_keyed_idx, "key <> ''" included (true of every item: keys are never
-- empty), which a statement must say whole for the planner to read that index. The claims'
-- and the polls' walks never say it, so that index is out of their reach (models.py says why).
$w.state IN {states_unsettled} AND $w.key <> ''


-- fragment: item_lock_key(key)
-- Lock every unsettled item of KEY (any queue); one row of 1 per item.
SELECT 1 FROM work_items AS w
WHERE w.key = $key AND {unsettled_keyed:w}
FOR UPDATE


-- fragment: item_lock_keys(keys)
-- Lock every unsettled item whose key is in KEYS (a parenthesised SELECT of keys), as
-- item_lock_key does for one (a batch's cancel locks its children's items first); one row of 1
-- per item.
SELECT 1 FROM work_items AS w
WHERE w.key IN $keys AND {unsettled_keyed:w}
FOR UPDATE


-- fragment: item_cancel_keys(source, key)
-- Stop, outcome cancelled, every unsettled item whose key is KEY of a row of the relation
-- SOURCE (what item_cancel_key does for one key; the caller locked them with
-- item_lock_keys earlier in the statement). Returns their ids.
UPDATE work_items AS w
SET state = 'stopped', outcome = 'cancelled', stopped_at = now(),
    stop_requested_at = coalesce(w.stop_requested_at, now()), lease_token = NULL, lease_expires_at = NULL
FROM $source
WHERE w.key = $key AND {unsettled_keyed:w}
RETURNING w.id


-- fragment: item_live_for(queue, key)
-- Whether a live item holds (QUEUE, KEY): a boolean expression.
EXISTS (SELECT 1 FROM work_items AS live WHERE live.queue = $queue AND live.key = $key
        AND live.state IN {states_live})


-- fragment: item_settle(source, id, outcome, error)
-- Stop item ID with OUTCOME and last_error ERROR, dropping its lease, for each row of the
-- relation SOURCE (a CTE: no row there, no write here). The caller has locked the row and
-- checked the proof (item_lock_held) earlier in the statement. Returns its id.
UPDATE work_items AS w
SET state = 'stopped', outcome = $outcome, stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
    last_error = $error,
    attempt_log = CASE WHEN $outcome = 'succeeded' THEN w.attempt_log ELSE {attempt_ended:w, $outcome, $error} END
FROM $source
WHERE w.id = $id
RETURNING w.id


-- fragment: item_retry_after(source, id, delay_s, error)
-- Item ID back to queued after DELAY_S seconds with last_error ERROR, lease dropped, if
-- SOURCE has a row (as item_settle). Returns its id.
UPDATE work_items AS w
SET state = 'queued', run_after = now() + make_interval(secs => $delay_s), lease_token = NULL,
    lease_expires_at = NULL, last_error = $error, reclaimed = false,
    attempt_log = {attempt_ended:w, 'retried', $error}
FROM $source
WHERE w.id = $id
RETURNING w.id


-- fragment: item_stop_refunded(id, token)
-- Settle a running item whose run turned out to be a no-op (outcome stopped), giving back
-- the attempt its claim charged, if TOKEN is still its proof. Returns its id.
UPDATE work_items AS w
SET state = 'stopped', outcome = 'stopped', stopped_at = now(), lease_token = NULL, lease_expires_at = NULL,
    attempts = greatest(w.attempts - 1, 0)
WHERE w.id = $id AND w.lease_token = $token AND w.state IN {states_running}
RETURNING w.id


-- fragment: item_wait_until(source, id, run_after)
-- Item ID back to queued, due at RUN_AFTER (NULL: a hundred years from now, i.e. only when
-- something makes it due), lease dropped and the attempt its claim charged given back, if
-- SOURCE has a row (as item_settle): a run that paused to wait, which is not an attempt spent.
-- Returns its id.
UPDATE work_items AS w
SET state = 'queued', run_after = coalesce($run_after, now() + interval '100 years'), lease_token = NULL,
    lease_expires_at = NULL, attempts = greatest(w.attempts - 1, 0), reclaimed = false
FROM $source
WHERE w.id = $id
RETURNING w.id


-- fragment: item_due_now(source, key)
-- Every queued item whose key is KEY of a row of the relation SOURCE, not yet due, becomes
-- due now (a waiting run was woken); the caller locked them earlier in the statement
-- (item_lock_key). Returns their queues.
UPDATE work_items AS w
SET run_after = now()
FROM $source
WHERE w.key = $key AND w.state = 'queued' AND w.run_after > now()
RETURNING w.queue


-- fragment: cap_lock(queue)
-- Take the transaction-scoped advisory lock under which max_running of the queue named by
-- the SQL expression QUEUE is checked (claim, poll and ack alike).
pg_advisory_xact_lock(hashtextextended('workqueue.max_running:' || $queue, 0))


-- fragment: slots_used(queue, wire)
-- The one definition of what counts against max_running: items of the queue held under a
-- live lease (starting, active, stopping; lapsed holders do not count), plus, when the SQL
-- boolean WIRE is true (an over_wire queue), live poll reservations: queued wire items whose
-- reservation has not lapsed, each one ack away from holding a slot. Claim, poll and ack all
-- count with it, under cap_lock. The holders are read through work_items_held_idx (few rows);
-- reservations through the live (queue, key) index, so a queue that is not served over the
-- wire skips that count.
(
    (SELECT count(*) FROM work_items slot_h
     WHERE slot_h.queue = $queue AND slot_h.state IN {states_held}
       AND slot_h.lease_expires_at > now())
    + CASE WHEN $wire
           THEN (SELECT count(*) FROM work_items slot_r
                 WHERE slot_r.queue = $queue AND slot_r.state = 'queued' AND slot_r.wire
                   AND slot_r.lease_expires_at > now())
           ELSE 0 END
)


-- fragment: starts_used(queue, seconds, wire)
-- What counts against a queue's rate: its starts in the sliding window of the last SECONDS
-- (work_queue_starts: a claim or a wire ack each), plus, on an over_wire queue (WIRE), live
-- poll reservations (each one ack away from a start).
(
    (SELECT count(*) FROM work_queue_starts st
     WHERE st.queue = $queue AND st.started_at > now() - make_interval(secs => $seconds))
    + CASE WHEN $wire
           THEN (SELECT count(*) FROM work_items st_r
                 WHERE st_r.queue = $queue AND st_r.state = 'queued' AND st_r.wire
                   AND st_r.lease_expires_at > now())
           ELSE 0 END
)


-- fragment: flow_gated(queue)
-- True when an operator's controls row gives the queue named by the SQL expression QUEUE
-- anything to enforce (paused, or any limit). The plain claim, which takes no per-queue lock
-- for such a queue, claims nothing from it: the caller's cached view of the controls was
-- stale, and the next claim takes the flow path (controls.sql).
EXISTS (
    SELECT 1 FROM work_queue_controls fg
    WHERE fg.queue = $queue
      AND (fg.paused OR fg.max_running IS NOT NULL OR fg.max_running_per_group IS NOT NULL
           OR fg.rate_count IS NOT NULL OR fg.rate_per_group_count IS NOT NULL)
)


-- fragment: flow_limits(c, u)
-- The limits flow control enforces on a queue, as a select list: the operator's override in
-- the work_queue_controls row C (LEFT JOINed: all NULL when the queue has none) wins over the
-- settings' value in U (columns cap, group_cap, rate_n, rate_s, group_rate_n, group_rate_s).
-- Output columns: paused, cap, group_cap, rate_n, rate_s, group_rate_n, group_rate_s. A rate's
-- period comes with its count: an overridden count brings the override's period.
coalesce($c.paused, false) AS paused,
coalesce($c.max_running, $u.cap) AS cap,
coalesce($c.max_running_per_group, $u.group_cap) AS group_cap,
coalesce($c.rate_count, $u.rate_n) AS rate_n,
CASE WHEN $c.rate_count IS NOT NULL THEN $c.rate_period ELSE $u.rate_s END AS rate_s,
coalesce($c.rate_per_group_count, $u.group_rate_n) AS group_rate_n,
CASE WHEN $c.rate_per_group_count IS NOT NULL THEN $c.rate_per_group_period ELSE $u.group_rate_s END
    AS group_rate_s


-- fragment: groups_held(q)
-- What counts against max_running_per_group, for every group of the queue row Q at once
-- (columns name, wire, group_cap): a SELECT of (group_key, held), each group's live holders
-- plus, on an over_wire queue, its live wire reservations; no rows when the limit is unset.
-- One read of the queue's held rows (work_items_held_idx) for all its groups; group_held
-- counts the same for one group.
SELECT gh.group_key, count(*) AS held FROM (
    SELECT h.group_key FROM work_items h
    WHERE $q.group_cap IS NOT NULL AND h.queue = $q.name
      AND h.state IN {states_held} AND h.lease_expires_at > now()
      AND h.group_key IS NOT NULL
    UNION ALL
    SELECT r.group_key FROM work_items r
    WHERE $q.group_cap IS NOT NULL AND $q.wire AND r.queue = $q.name AND r.state = 'queued'
      AND r.wire AND r.lease_expires_at > now() AND r.group_key IS NOT NULL
) gh
GROUP BY gh.group_key


-- fragment: groups_full(q)
-- The groups of the queue row Q (columns name, wire, group_cap, group_rate_n, group_rate_s)
-- with no room left: as many live holders (plus live wire reservations) as
-- max_running_per_group, or as many starts in the window as rate_per_group. A text[]; the
-- scans under it are skipped when the limit is unset.
coalesce((
    SELECT array_agg(DISTINCT full_g.group_key) FROM (
        SELECT held_g.group_key FROM ({groups_held:$q}) AS held_g
        WHERE held_g.held >= $q.group_cap
        UNION ALL
        SELECT gs.group_key FROM work_queue_starts gs
        WHERE $q.group_rate_n IS NOT NULL AND gs.queue = $q.name
          AND gs.group_key IS NOT NULL
          AND gs.started_at > now() - make_interval(secs => $q.group_rate_s)
        GROUP BY gs.group_key HAVING count(*) >= $q.group_rate_n
    ) full_g
), '{}'::text[])


-- fragment: group_held(q, group)
-- What groups_held counts, for the one group GROUP of the queue row Q: its live holders plus,
-- on an over_wire queue, its live wire reservations (a number; a wire ack's check).
(
    (SELECT count(*) FROM work_items h
     WHERE h.queue = $q.name AND h.group_key = $group
       AND h.state IN {states_held} AND h.lease_expires_at > now())
    + CASE WHEN $q.wire
           THEN (SELECT count(*) FROM work_items r
                 WHERE r.queue = $q.name AND r.group_key = $group
                   AND r.state = 'queued' AND r.wire AND r.lease_expires_at > now())
           ELSE 0 END
)


-- fragment: group_room(q, group, held)
-- How many more items of group GROUP the queue row Q (as in groups_full) may start now, HELD
-- being what the group holds (group_held for one group; a claim, which meets several, reads
-- all of its queue's at once with groups_held): NULL when neither per-group limit is set.
least(
    CASE WHEN $q.group_cap IS NOT NULL THEN $q.group_cap - $held END,
    CASE WHEN $q.group_rate_n IS NOT NULL
         THEN $q.group_rate_n
              - (SELECT count(*) FROM work_queue_starts gs
                 WHERE gs.queue = $q.name AND gs.group_key = $group
                   AND gs.started_at > now() - make_interval(secs => $q.group_rate_s))
    END
)


-- fragment: flow_wire_gate(r)
-- A wire poll's candidate row R passes the flow checks made under the locks just before
-- (queue_flow_blocked: %(blocked_groups)s), and is not of a queue an operator put under
-- control since the caller last looked (%(flow_queues)s were checked).
($r.group_key IS NULL OR ($r.queue || chr(31) || $r.group_key) <> ALL (%(blocked_groups)s::text[]))
AND ($r.queue = ANY (%(flow_queues)s::text[]) OR NOT {flow_gated:$r.queue})


-- fragment: by_pkey(w, ids)
-- A predicate that makes a statement reach the work_items rows W it writes by primary key:
-- W's id is in the array of the subquery IDS (a SELECT of ids). The array is worked out
-- when the statement runs, so the planner cannot see its size and plans a primary-key lookup
-- for a few ids, whatever it estimates elsewhere. Without it, a join of a few hundred ids to
-- work_items (a claim's candidates, a settle's or a renewal's presented ids) looked cheaper to
-- the planner as a scan of the whole table whenever the table was of middling size or the
-- estimates were off (a queue the statistics did not know yet, held rows estimated at one):
-- 23 ms instead of 3 for a settle of 300 items on a table of 30,000 rows.
$w.id = ANY (ARRAY($ids))


-- fragment: claim_walk(q)
-- A claim's two index walks, as the CTEs ready and lapsed (each followed by a comma), per
-- row of the relation Q (columns name, n, lease_s: a queue, how many it may take, its lease):
-- its best ready items (priority, run_after, age; work_items_claim_idx) and its items whose
-- holder's lease lapsed (oldest expiry first; work_items_held_idx), at most n of each, never
-- wire items, each row locked, skipping rows another claim holds. Columns: id, lapsed,
-- priority, run_after, spent, queue_name, quota (n), lease_s.
ready AS (
    SELECT c.*, $q.name AS queue_name, $q.n AS quota, $q.lease_s FROM $q CROSS JOIN LATERAL (
        SELECT w.id, false AS lapsed, w.priority, w.run_after, w.attempts >= w.max_attempts AS spent
        FROM work_items w
        WHERE w.state = 'queued' AND NOT w.wire AND w.queue = $q.name AND w.run_after <= now()
        ORDER BY w.priority DESC, w.run_after, w.id
        LIMIT $q.n
        FOR UPDATE SKIP LOCKED
    ) AS c
),
lapsed AS (
    SELECT c.*, $q.name AS queue_name, $q.n AS quota, $q.lease_s FROM $q CROSS JOIN LATERAL (
        SELECT w.id, true AS lapsed, w.priority, w.run_after, {lapsed_spent:w} AS spent
        FROM work_items w
        WHERE w.state IN {states_running} AND NOT w.wire AND w.queue = $q.name
          AND w.lease_expires_at < now()
        ORDER BY w.lease_expires_at
        LIMIT $q.n
        FOR UPDATE SKIP LOCKED
    ) AS c
),


-- fragment: claim_take(candidates)
-- The take of a claim (item_claim, item_claim_flow), as two CTEs, claimed and settled, over
-- the relation CANDIDATES (columns id, lapsed, spent, lease_s; rows locked by the walk that
-- found them). Each candidate is handed out (active, an attempt charged, a fresh lease
-- proof, reclaimed when its lease had lapsed), except a lapsed one that spent its attempts,
-- which is settled instead (lapsed_settle). Both return {claimed} (run_after among its
-- columns: the claim order sorts on it). Follow with {claim_handed}.
claimed AS (
    UPDATE work_items w
    SET state = 'active', attempts = w.attempts + 1, lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => c.lease_s), started_at = now(),
        claimed_by = %(worker_id)s, reclaimed = c.lapsed,
        attempt_log = CASE WHEN c.lapsed THEN {attempt_ended:w, 'lease lapsed', NULL} ELSE w.attempt_log END
    FROM $candidates c
    WHERE {by_pkey:w, SELECT id FROM $candidates} AND w.id = c.id AND NOT (c.lapsed AND c.spent)
    RETURNING {claimed}
),
settled AS (
    UPDATE work_items w
    SET {lapsed_settle:w}
    FROM $candidates c
    WHERE {by_pkey:w, SELECT id FROM $candidates} AND w.id = c.id AND c.lapsed AND c.spent
    RETURNING {claimed}
)


-- fragment: claim_handed()
-- A claim's result, after claim_take's CTEs: the handed-out and the settled rows, best first
-- (priority, run_after, id), each with a relaxed_commit column: {relaxed}, except when the
-- claim settled spent items, since terminal writes wait for the disk.
SELECT handed.*,
       (SELECT set_config('synchronous_commit', 'off', true)
        WHERE %(relaxed)s::bool AND NOT EXISTS (SELECT 1 FROM settled)) AS relaxed_commit
FROM (SELECT * FROM claimed UNION ALL SELECT * FROM settled) AS handed
ORDER BY handed.priority DESC, handed.run_after, handed.id


-- fragment: presented_at(w, p)
-- The position of W's proof among the proofs a worker presented, P.tokens (uuid[], sorted:
-- the store sorts the pairs by proof), found by binary search; the position of the last
-- proof below it when W's is not there (presented_pair checks). A batch statement (settle,
-- renewal, give-back) matches each row to its pair with it, not with a join to the unnested
-- pairs: planned with the held rows estimated at one (statistics taken while nothing was
-- held), such a join read the pairs again for every row.
width_bucket($w.lease_token, $p.tokens)


-- fragment: presented_pair(w, p)
-- W holds one of the (id, proof) pairs presented in the arrays P.ids and P.tokens (sorted by
-- proof, position for position): its proof is there, and the pair names W's id.
$p.tokens[{presented_at:$w, $p}] = $w.lease_token AND $p.ids[{presented_at:$w, $p}] = $w.id


-- fragment: running_by_pkey(w)
-- W is running (starting or active: states_running), written as "neither unheld nor
-- stopping" so that the planner cannot read work_items_held_idx end to end in place of a
-- statement's primary-key lookups: it estimates the held rows at one on a table of history.
$w.state NOT IN {states_unheld} AND $w.state <> 'stopping'
