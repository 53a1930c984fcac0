-- Every statement the operations app runs by hand, named entity-first.
-- {table} is the operations table (OPERATIONS TABLE_PREFIX), {op} its column list (both
-- generated in operations/store.py), {notify:ID} a payload-free pg_notify on OPERATIONS NOTIFY_CHANNEL when some process is
-- watching operation ID (a row in {watches}); nothing when the channel is ''. Gating it
-- matters: a transaction that notifies holds a database-wide lock through its commit, so
-- unwatched operations must not queue their commits behind each other for nobody's benefit.
-- {open_attempt} / {close_attempt} append to / finish the bounded attempt_log (these and
-- {notify:ID} are in operations/sql/fragments.sql).
-- Every write bumps revision (the watcher's change signal) and updated_at.
-- A running operation and its work item share one lease: the operation's claimed_until and
-- the item's lease_expires_at move together, and the item's lease proof is the row's.
-- Lock order: a statement that writes both rows takes the work item's row first, then the
-- operation's (the queue settles items first and tells operations in the same transaction), so
-- a runner's write and a queue rule, an operator or a cancel never deadlock. The item's write
-- comes first and the operation's depends on it: no operation write lands without its item.
-- The work item is never written here: every item write or lock is a fragment of
-- workqueue/sql/fragments.sql (listed at its top), called as {name:args}, e.g.
-- {item_insert:ROWS}, {item_extend_held:ID, TOKEN, LEASE_S}, {item_lock_held:ID, TOKEN, STATES},
-- {item_settle:SOURCE, ID, OUTCOME, ERROR}, {lapsed_error:ATTEMPTS, MAX}; {states_NAME} is a state set
-- of workqueue/states.py.


-- name: op_start
-- Record a pending operation and its work item in one statement (the caller's transaction,
-- or its own). ON CONFLICT DO NOTHING keeps the caller's transaction alive on a duplicate
-- id: nothing is written and the caller reads the existing row. The work item goes in through
-- item_enqueue's own fragment (item_insert): never a wire item (operations queues are not
-- over_wire, a check says so), and idle workers are woken at commit.
WITH ins AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              workflow, created_at, updated_at)
    VALUES (%(id)s, %(kind)s, %(owner)s, 'pending', %(queue)s, %(priority)s, %(request)s, %(count_label)s,
            %(max_attempts)s, %(workflow)s, now(), now())
    ON CONFLICT (id) DO NOTHING
    RETURNING {op}
),
item AS (
    {item_insert:(
        SELECT ins.queue, ins.id AS key, NULL::text AS environment_id, ins.priority,
               coalesce(%(run_after)s::timestamptz, now() + make_interval(secs => %(delay)s)) AS run_after,
               0 AS attempts, ins.max_attempts, jsonb_build_object() AS metadata, %(trace_context)s::jsonb AS trace_context,
               false AS wire, %(group)s::text AS group_key
        FROM ins
    )}
    {item_skip_live}
    RETURNING pg_notify(%(queue_channel)s::text, w.queue)
)
SELECT ins.* FROM ins;


-- name: op_get_many
-- The watcher's one read per wake: every followed operation, without request or attempt log.
SELECT {op_light} FROM {table} o WHERE o.id = ANY(%(ids)s::text[]);


-- name: op_begin
-- The guarded transition (relaxed: a begin lost in a server crash reverts to a state that is
-- re-offered): pending, or running with a lapsed lease, becomes running under this
-- worker's lease (the work item's proof), charging one attempt. Exactly one worker matches.
-- The work item is written first (its lease moved, proof checked under its row lock, so a
-- concurrent requeue or force stop is seen), and the operation is taken only through it, to
-- the same expiry. A requested cancellation is never begun: op_settle_unbegun ends it. Nor is
-- a dependent still waiting for its dependencies (deps_open above 0), whatever item names it.
WITH item AS (
    {item_extend_held:%(item_id)s, %(token)s, %(lease)s}
),
began AS (
    UPDATE {table} AS o
    SET state = 'running', attempts = o.attempts + 1,
        claimed_until = item.lease_expires_at, lease_token = %(token)s,
        worker_id = %(worker_id)s::text, started_at = coalesce(o.started_at, now()),
        wait_kind = '', wait_name = '', wake_at = NULL,
        updated_at = now(), revision = o.revision + 1,
        attempt_log = {open_attempt}
    FROM item
    WHERE o.id = %(id)s
      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until < now()))
      AND o.attempts < o.max_attempts AND NOT o.cancel_requested AND o.deps_open = 0
    RETURNING {op_run}
)
SELECT began.*, {notify:began.id}, {relaxed} FROM began;


-- name: op_settle_unbegun
-- begin's other answers, for an operation that could be taken but must not run: a requested
-- cancellation (asked while no runner was alive to see it) ends it cancelled, with no attempt
-- charged and no error; spent attempts fail it attempts_exhausted, carrying the last error
-- (retryable true, as the runner records it: it would have been retried had attempts remained).
-- Its work item is settled to match; a spent one with the lapsed-lease error every other
-- lapsed-lease decision writes (lapsed_error), counted in the operation's attempts. Only by the item's holder, whose row is locked first.
WITH held AS (
    {item_lock_held:%(item_id)s, %(token)s, {states_running}}
),
gone AS (
    UPDATE {table} AS o
    SET state = CASE WHEN o.cancel_requested THEN 'cancelled' ELSE 'failed' END,
        error_code = CASE WHEN o.cancel_requested THEN '' ELSE 'attempts_exhausted' END,
        error_retryable = CASE WHEN o.cancel_requested THEN NULL ELSE true END,
        error_message = CASE WHEN o.cancel_requested THEN ''
                             ELSE left(coalesce(nullif(o.error_message, ''),
                                                format('gave up after %%s attempts', o.attempts)), 1024) END,
        finished_at = now(), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1
    FROM held
    WHERE o.id = %(id)s
      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until < now()))
      AND (o.cancel_requested OR o.attempts >= o.max_attempts)
    RETURNING o.id, o.state, o.attempts, o.max_attempts
),
item AS (
    {item_settle:gone, %(item_id)s,
                 CASE gone.state WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END,
                 CASE gone.state WHEN 'cancelled' THEN 'operation cancelled before this attempt began'
                                 ELSE {lapsed_error:gone.attempts, gone.max_attempts} END}
)
SELECT gone.id, gone.state, {notify:gone.id} FROM gone;


-- name: op_item_noop
-- begin was refused (another worker has the operation, or it is finished): settle the work
-- item as a no-op and give back the attempt its claim charged.
{item_stop_refunded:%(item_id)s, %(token)s};


-- name: op_flush
-- A progress flush, the one statement a running operation issues regularly (relaxed, like
-- begin: see the relaxed fragment in workqueue/sql/fragments.sql): write progress,
-- extend the lease (work item, then row), and learn whether cancellation was requested and
-- whether this worker still holds the operation (no row back = not held). Held means the
-- work item is still this worker's: a runner silent past its lease, whose item another worker
-- has claimed since, writes nothing and hears that it lost the operation.
WITH item AS (
    {item_extend_held:%(item_id)s, %(token)s, %(lease)s}
),
f AS (
    UPDATE {table} AS o
    SET units_total = %(units_total)s::int, units_done = %(units_done)s::int, unit = %(unit)s::text,
        message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        claimed_until = item.lease_expires_at, updated_at = now(), revision = o.revision + 1
    FROM item
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running'
    RETURNING o.id, o.revision, o.cancel_requested
)
SELECT f.revision, f.cancel_requested, {notify:f.id}, {relaxed} FROM f;


-- name: op_stop_reason
-- Why a run's flush found it no longer holds the operation (asked only then, never on the
-- flushes' path): cancelled (a cancel_key or force stop of its work item, through the
-- items-moved hook) → cancel_requested; failed past its queue's hard_timeout (the hook's
-- code) → timeout; anything else (another worker began it since: a begin charges an
-- attempt, so attempts differ) → lease_lost.
SELECT CASE
    WHEN o.attempts <> %(attempt)s THEN 'lease_lost'
    WHEN o.state = 'cancelled' OR o.cancel_requested THEN 'cancel_requested'
    WHEN o.state = 'failed' AND o.error_code IN ('hard_timeout', 'timeout') THEN 'timeout'
    ELSE 'lease_lost'
END
FROM {table} AS o
WHERE o.id = %(id)s;


-- name: op_finish
-- Write a terminal state with the final progress and drop the lease; settle the work item.
-- cancel_wins: an error that races a requested cancellation is recorded as cancelled (code
-- cancelled, the error's message kept), since the runner was asked to stop. Only while this
-- worker holds the work item, whose row is locked first. Returns the operation as saved
-- (what a kind's finished callback reports, e.g. django.tasks' task_finished, with no read).
WITH held AS (
    {item_lock_held:%(item_id)s, %(token)s, {states_held}}
),
f AS (
    UPDATE {table} AS o
    SET state = CASE WHEN %(cancel_wins)s::bool AND o.cancel_requested THEN 'cancelled' ELSE %(state)s::text END,
        error_code = CASE WHEN %(cancel_wins)s::bool AND o.cancel_requested THEN 'cancelled'
                          ELSE %(error_code)s::text END,
        error_message = %(error_message)s::text,
        error_retryable = CASE WHEN %(error_code)s::text = '' THEN NULL ELSE %(error_retryable)s::bool END,
        result_uri = %(result_uri)s::text, result_detail = %(result_detail)s::jsonb,
        units_total = %(units_total)s::int,
        units_done = CASE WHEN %(all_done)s::bool AND %(units_total)s::int IS NOT NULL
                          THEN %(units_total)s::int ELSE %(units_done)s::int END,
        unit = %(unit)s::text, message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        finished_at = now(), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1,
        attempt_log = {close_attempt}
    FROM held
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running'
    RETURNING {op}
),
item AS (
    {item_settle:f, %(item_id)s,
                 CASE f.state WHEN 'succeeded' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END,
                 %(error_message)s::text}
)
SELECT f.*, {notify:f.id} FROM f;


-- name: op_release
-- A retryable failure: back to pending with the error recorded, lease dropped; the work item
-- goes back to queued after the retry delay. Refused when cancellation was requested (the
-- caller then finishes it as cancelled). Only while this worker holds the work item, whose
-- row is locked first.
WITH held AS (
    {item_lock_held:%(item_id)s, %(token)s, {states_running}}
),
r AS (
    UPDATE {table} AS o
    SET state = 'pending', error_code = %(error_code)s::text, error_message = %(error_message)s::text,
        error_retryable = true, claimed_until = NULL, lease_token = NULL,
        units_total = %(units_total)s::int, units_done = %(units_done)s::int, unit = %(unit)s::text,
        message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        updated_at = now(), revision = o.revision + 1,
        attempt_log = {close_attempt}
    FROM held
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running' AND NOT o.cancel_requested
    RETURNING o.id
),
item AS (
    {item_retry_after:r, %(item_id)s, %(delay)s, %(error_message)s::text}
)
SELECT r.id, {notify:r.id} FROM r;


-- name: op_cancel
-- Ask an operation to stop. Pending: cancelled outright (nothing started), and a retry's
-- error is cleared, since that error is not how it ended. Running: the flag is set and the
-- runner decides. A repeat on a running one changes nothing (no revision bump).
-- Terminal: no row (the caller returns it unchanged). owner NULL means any owner.
-- The operation's unsettled work items are locked first (the lock order), since a pending
-- operation's cancel goes on to cancel its item (cancel_key) in the same transaction.
WITH held AS (
    SELECT count(*) AS n FROM ({item_lock_key:%(id)s}) AS locked
),
c AS (
    UPDATE {table} AS o
    SET {op_cancel_set:o}
    FROM held
    WHERE o.id = %(id)s AND (%(owner)s::text IS NULL OR o.owner = %(owner)s::text)
      AND {op_cancelable:o}
    RETURNING {op}
)
SELECT c.*, {notify:c.id} FROM c;


-- name: op_settle_from_queue
-- A queue rule settled these operations' work items by itself (attempts spent on a lapsed
-- lease, hard timeout, cancel_key, force stop): settle the unfinished operations to match,
-- in the same transaction. An attempts_exhausted failure keeps the last error's message and,
-- like the runner's, is marked retryable (it would have been retried had attempts remained).
WITH s AS (
    UPDATE {table} AS o
    SET state = %(state)s::text,
        cancel_requested = o.cancel_requested OR %(state)s::text = 'cancelled',
        error_code = %(error_code)s::text,
        error_message = left(CASE WHEN %(error_code)s::text = 'attempts_exhausted'
                                  THEN coalesce(nullif(o.error_message, ''), %(error_message)s::text)
                                  ELSE %(error_message)s::text END, 1024),
        error_retryable = CASE WHEN %(error_code)s::text = '' THEN NULL
                               ELSE %(error_code)s::text = 'attempts_exhausted' END,
        finished_at = now(), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1
    WHERE o.id = ANY(%(ids)s::text[]) AND o.state IN ('pending', 'running')
    RETURNING o.id
)
SELECT s.id, {notify:s.id} FROM s;


-- name: op_expire_lease
-- An operator requeued the work item of a running operation: end the operation's lease now
-- so the next begin takes it instead of refusing.
WITH e AS (
    UPDATE {table} AS o
    SET claimed_until = now() - interval '1 microsecond', lease_token = NULL,
        updated_at = now(), revision = o.revision + 1
    WHERE o.id = ANY(%(ids)s::text[]) AND o.state = 'running'
    RETURNING o.id
)
SELECT e.id, {notify:e.id} FROM e;


-- name: op_release_held
-- A worker shutting down handed the work items of these running operations back: release
-- the operations too (pending, attempt refunded, lease dropped) so another worker begins them
-- at once. Matched on the lease proof, so only this worker's holds are released.
WITH r AS (
    UPDATE {table} AS o
    SET state = 'pending', attempts = greatest(o.attempts - 1, 0), claimed_until = NULL, lease_token = NULL,
        updated_at = now(), revision = o.revision + 1,
        attempt_log = {close_released}
    FROM unnest(%(ids)s::text[], %(tokens)s::uuid[]) AS t(id, token)
    WHERE o.id = t.id AND o.lease_token = t.token AND o.state = 'running'
    RETURNING o.id
)
SELECT r.id, {notify:r.id} FROM r;


-- name: op_stranded
-- recover: unfinished operations nothing will pick up: pending for longer than the grace with
-- no live work item (the enqueue was lost), and running ones whose lease lapsed that long ago
-- with no live work item. Locked so concurrent sweeps never re-offer one twice. A dependent
-- still waiting for its dependencies (deps_open above 0) has no work item by design: never it.
SELECT o.id, o.queue, o.attempts, o.max_attempts, o.priority
FROM {table} AS o
WHERE ((o.state = 'pending' AND o.deps_open = 0 AND o.updated_at < coalesce(%(now)s, now()) - make_interval(secs => %(after)s))
    OR (o.state = 'running' AND o.claimed_until < coalesce(%(now)s, now()) - make_interval(secs => %(after)s)))
  AND NOT {item_live_for:o.queue, o.id}
ORDER BY o.updated_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;


-- name: op_reap
-- reap: delete terminal operations finished longer than the retention ago, a batch at a time
-- (of top-level operations). A child goes only with its parent, in the same statement, never
-- before it (a parent ends only once all its children have): a batch's rows go together. A
-- workflow's recorded steps and its signals go with it, and so do the dependency edges of
-- every row deleted (those onto it only once counted: an uncounted one is recover's to decide).
WITH doomed AS (
    SELECT id FROM {table}
    WHERE state IN ('succeeded', 'failed', 'cancelled')
      AND finished_at < coalesce(%(now)s, now()) - make_interval(secs => %(retention)s)
      AND parent_id IS NULL
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
steps AS (
    DELETE FROM {steps} AS s WHERE s.op_id IN (SELECT id FROM doomed)
),
signals AS (
    DELETE FROM {signals} AS g WHERE g.op_id IN (SELECT id FROM doomed)
),
gone AS (
    SELECT id FROM doomed
    UNION ALL
    SELECT k.id FROM {table} AS k WHERE k.parent_id IS NOT NULL AND k.parent_id IN (SELECT id FROM doomed)
),
edges AS (
    DELETE FROM {deps} AS e
    WHERE e.id IN (SELECT x.id FROM {deps} AS x WHERE x.op_id IN (SELECT id FROM gone)
                   UNION
                   SELECT x.id FROM {deps} AS x WHERE x.decided AND x.after_id IN (SELECT id FROM gone))
)
DELETE FROM {table}
WHERE id IN (SELECT id FROM doomed)
   OR (parent_id IS NOT NULL AND parent_id IN (SELECT id FROM doomed));


-- name: watch_follow
-- A process starts (or keeps) following an operation: writes to it notify until `until`.
INSERT INTO {watches} AS w (op_id, watcher, until)
SELECT unnest(%(ids)s::text[]), %(watcher)s, now() + make_interval(secs => %(ttl)s)
ON CONFLICT (op_id, watcher) DO UPDATE SET until = excluded.until;


-- name: watch_forget
-- A process stopped following these operations (all of them when ids is NULL).
DELETE FROM {watches}
WHERE watcher = %(watcher)s AND (%(ids)s::text[] IS NULL OR op_id = ANY(%(ids)s::text[]));


-- name: watch_reap
-- reap: forget follows whose process went away without saying so.
DELETE FROM {watches} WHERE until < coalesce(%(now)s, now()) - interval '1 minute';


-- ---------------------------------------------------------------------------------------
-- Batches and chains (operations/batches.py). A batch or a chain is an operation (kind
-- operations.batch / operations.chain) that no worker runs: it is created running, with no
-- work item (so begin, recover and the lease sweeps never touch it), and its children's ends
-- settle it. Its request holds what its children's ends will start, as specs
-- {id, kind, request, queue, priority, count_label, max_attempts} with ids minted up front
-- (a second insert of the same id does nothing: exactly once twice over): "then" (plus "on",
-- the end states it runs on) and, for a chain, "steps" (by position).
-- Lock order, as everywhere: work items, then operations; among operations, children before
-- their parent.


-- name: op_parent_start
-- Record a batch or a chain, running, with its first children (a batch: all of them; a chain:
-- its first step) and their work items, in one statement, in the caller's transaction. A
-- duplicate id writes nothing and the caller reads the existing row. Idle workers are woken
-- once per queue at commit, not once per child.
WITH parent AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              units_total, children_total, started_at, created_at, updated_at)
    VALUES (%(id)s, %(kind)s, %(owner)s, 'running', %(queue)s, %(priority)s, %(request)s, %(count_label)s, 1,
            %(total)s, %(total)s, now(), now(), now())
    ON CONFLICT (id) DO NOTHING
    RETURNING {op}
),
child AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              parent_id, position, created_at, updated_at)
    SELECT c.spec ->> 'id', c.spec ->> 'kind', parent.owner, 'pending', c.spec ->> 'queue',
           (c.spec ->> 'priority')::int, c.spec -> 'request', c.spec ->> 'count_label',
           (c.spec ->> 'max_attempts')::int, parent.id, (c.n - 1)::int, now(), now()
    FROM parent, jsonb_array_elements(%(children)s::jsonb) WITH ORDINALITY AS c(spec, n)
    RETURNING o.id, o.queue, o.priority, o.max_attempts
),
item AS (
    {item_insert:(
        SELECT child.queue, child.id AS key, NULL::text AS environment_id, child.priority, now() AS run_after,
               0 AS attempts, child.max_attempts, jsonb_build_object() AS metadata, NULL::jsonb AS trace_context,
               false AS wire, c.spec ->> 'group' AS group_key
        FROM child JOIN jsonb_array_elements(%(children)s::jsonb) AS c(spec) ON c.spec ->> 'id' = child.id
    )}
    {item_skip_live}
    RETURNING w.queue
),
woke AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT item.queue FROM item) AS q
)
SELECT parent.*, (SELECT count(*) FROM woke) AS woken FROM parent;


-- name: op_fan_in
-- The fan-in, run in the transaction of every write that ends an operation, right after it,
-- with the ids that write returned: count the children among them on their parents and settle
-- each parent whose last open child this was (a chain: also one whose step failed or was
-- cancelled, or whose cancel was asked), starting what that end starts (a chain's next step,
-- the parent's then) and its work item, all in this one statement.
-- Exactly once: a child is counted only while its fanned_in is false, and this statement sets
-- it (the write is re-checked under the child's row lock, so two callers cannot both count
-- it). The parent is settled from a tally on its own row, updated under its row lock: the
-- UPDATE reads the row as the last committed child left it. A scan of the siblings would not
-- do: it reads this statement's snapshot, taken before the lock wait, so two last children
-- ending at once would each see the other still open and the parent would hang.
-- A batch ends cancelled when its cancel was asked, else failed when any child failed (error
-- children_failed: how many, and the first failure), else cancelled when a child was
-- cancelled on its own, else succeeded. A chain ends with its failed step's error code.
WITH done AS (
    UPDATE {table} AS c SET fanned_in = true
    WHERE c.id = ANY(%(ids)s::text[]) AND c.parent_id IS NOT NULL AND NOT c.fanned_in
      AND c.state IN ('succeeded', 'failed', 'cancelled')
    RETURNING c.id, c.parent_id, c.kind, c.state, c.position, c.count, c.error_code, c.error_message,
              c.finished_at, c.result_uri, c.result_detail
),
tally AS (
    SELECT d.parent_id,
           count(*) FILTER (WHERE d.state = 'succeeded') AS ok,
           count(*) FILTER (WHERE d.state = 'failed') AS bad,
           count(*) FILTER (WHERE d.state = 'cancelled') AS off,
           coalesce(sum(d.count), 0) AS n,
           max(d.position) AS pos,
           (array_agg(d.error_code ORDER BY d.finished_at, d.position) FILTER (WHERE d.state = 'failed'))[1] AS fail_code,
           (array_agg(format('%%s (%%s, #%%s): %%s', d.id, d.kind, d.position + 1, d.error_message)
                      ORDER BY d.finished_at, d.position) FILTER (WHERE d.state = 'failed'))[1] AS fail_message,
           (array_agg(d.result_uri ORDER BY d.position DESC))[1] AS result_uri,
           (array_agg(d.result_detail ORDER BY d.position DESC))[1] AS result_detail
    FROM done AS d
    GROUP BY d.parent_id
),
settled AS (
    UPDATE {table} AS o
    SET (children_succeeded, children_failed, children_cancelled, units_done, count, state,
         error_code, error_message, error_retryable, result_uri, result_detail, finished_at,
         updated_at, revision) = (
        SELECT v.ok, v.bad, v.off, v.ok + v.bad + v.off, o.count + t.n, v.state,
               CASE WHEN v.state = 'failed' AND o.kind = 'operations.batch' THEN 'children_failed'
                    WHEN v.state IN ('failed', 'running') THEN v.fcode ELSE '' END,
               CASE WHEN v.state = 'failed' AND o.kind = 'operations.batch'
                    THEN left(format('%%s of %%s children failed; the first: %%s [%%s]',
                                     v.bad, o.children_total, v.fmessage, v.fcode), 1024)
                    WHEN v.state = 'failed' THEN left(format('a step failed: %%s', v.fmessage), 1024)
                    WHEN v.state = 'running' THEN v.fmessage ELSE '' END,
               CASE WHEN v.state = 'failed' THEN false END,
               CASE WHEN v.state = 'succeeded' AND o.kind = 'operations.chain' THEN coalesce(t.result_uri, '')
                    ELSE o.result_uri END,
               CASE WHEN v.state <> 'succeeded' THEN o.result_detail
                    WHEN o.kind = 'operations.chain' THEN t.result_detail
                    ELSE jsonb_build_object('children', o.children_total, 'succeeded', v.ok) END,
               CASE WHEN v.state = 'running' THEN NULL ELSE now() END,
               now(), o.revision + 1
        FROM (
            SELECT u.*,
                   CASE WHEN NOT (u.ok + u.bad + u.off >= o.children_total
                                  OR (o.kind = 'operations.chain' AND (t.bad > 0 OR t.off > 0 OR o.cancel_requested)))
                        THEN o.state
                        WHEN o.cancel_requested THEN 'cancelled'
                        WHEN u.bad > 0 THEN 'failed'
                        WHEN u.off > 0 THEN 'cancelled'
                        ELSE 'succeeded' END AS state
            FROM (
                -- the tally after this round, and the first failure (kept on the running
                -- parent's error fields, which are not shown while it runs)
                SELECT o.children_succeeded + t.ok AS ok, o.children_failed + t.bad AS bad,
                       o.children_cancelled + t.off AS off,
                       coalesce(nullif(o.error_code, ''), t.fail_code, '') AS fcode,
                       CASE WHEN o.error_code <> '' THEN o.error_message ELSE coalesce(t.fail_message, '') END AS fmessage
            ) AS u
        ) AS v
    )
    FROM tally AS t
    WHERE o.id = t.parent_id AND o.state IN ('pending', 'running')
    RETURNING o.id, o.kind, o.state, o.owner, o.request, t.pos
),
next AS (
    -- a chain whose step succeeded, and which goes on: its next step
    SELECT s.request -> 'steps' -> (s.pos + 1) AS spec, s.id AS parent_id, s.pos + 1 AS position,
           NULL::text AS follows_id, s.owner
    FROM settled AS s
    WHERE s.kind = 'operations.chain' AND s.state = 'running' AND s.request -> 'steps' -> (s.pos + 1) IS NOT NULL
    UNION ALL
    -- a parent that ended in a state its then runs on: the then
    SELECT s.request -> 'then', NULL, NULL, s.id, s.owner
    FROM settled AS s
    WHERE s.state NOT IN ('pending', 'running') AND jsonb_typeof(s.request -> 'then') = 'object'
      AND (s.request -> 'then' -> 'on') ? s.state
),
started AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              parent_id, position, follows_id, created_at, updated_at)
    SELECT x.spec ->> 'id', x.spec ->> 'kind', x.owner, 'pending', x.spec ->> 'queue', (x.spec ->> 'priority')::int,
           x.spec -> 'request', x.spec ->> 'count_label', (x.spec ->> 'max_attempts')::int,
           x.parent_id, x.position, x.follows_id, now(), now()
    FROM next AS x
    ON CONFLICT (id) DO NOTHING
    RETURNING o.id, o.queue, o.priority, o.max_attempts
),
item AS (
    {item_insert:(
        SELECT started.queue, started.id AS key, NULL::text AS environment_id, started.priority,
               now() AS run_after, 0 AS attempts, started.max_attempts, jsonb_build_object() AS metadata,
               NULL::jsonb AS trace_context, false AS wire, x.spec ->> 'group' AS group_key
        FROM started JOIN next AS x ON x.spec ->> 'id' = started.id
    )}
    {item_skip_live}
    RETURNING w.queue
),
woke AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT item.queue FROM item) AS q
)
SELECT s.id, s.state, (SELECT array_agg(started.id) FROM started) AS started,
       (SELECT count(*) FROM woke) AS woken, {notify:s.id}
FROM settled AS s;


-- name: op_fan_in_due
-- recover: children that ended but were never counted on their parent (only a fan-in lost
-- between statements leaves one: it runs in the transaction that ends the child). Locked, so
-- a child whose ending transaction is still open is skipped, and concurrent sweeps never
-- count one twice (op_fan_in re-checks fanned_in under the lock anyway).
SELECT o.id FROM {table} AS o
WHERE o.parent_id IS NOT NULL AND NOT o.fanned_in AND o.state IN ('succeeded', 'failed', 'cancelled')
ORDER BY o.finished_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;


-- name: op_cancel_children
-- Cancel of a batch or chain, first half: every pending child is cancelled outright (its work
-- item settled cancelled in the same statement) and every running one is asked to stop (the
-- flag; its runner decides at its next flush). The children's unsettled work items are locked
-- first, then the children (lock order); the parent is cancelled after this, and op_fan_in
-- counts the children that ended here. Returns the children cancelled outright. Each child's
-- cancel is op_cancel's (op_cancel_set, op_cancelable).
WITH kids AS (
    SELECT k.id, k.queue FROM {table} AS k
    WHERE k.parent_id = %(id)s AND k.state IN ('pending', 'running')
),
held AS (
    SELECT count(*) AS n FROM ({item_lock_keys:(SELECT kids.id FROM kids)}) AS locked
),
c AS (
    UPDATE {table} AS o
    SET {op_cancel_set:o}
    FROM held, kids
    WHERE o.id = kids.id AND {op_cancelable:o}
    RETURNING o.id, o.queue, o.state
),
stopped AS (
    {item_cancel_keys:(SELECT c.id FROM c WHERE c.state = 'cancelled') AS gone, gone.id}
)
SELECT c.id, c.state, (SELECT count(*) FROM stopped) AS items_stopped, {notify:c.id} FROM c;


-- Workflows (operations/workflows.py). A workflow is an operation whose run records its steps
-- in {steps}, one row per position: a checkpointed call (kind step), a sleep, a wait, a patch
-- marker or a child operation it started. A step's writes are made only while the run holds
-- the operation ({wf_held}: its lease proof), so a run that lost its hold records nothing.


-- name: step_list
-- What a workflow run recorded so far, in position order (read once when a run begins; a
-- resumed run replays it), with whether a sleep's or a wait's wake time has come.
SELECT s.position, s.name, s.kind, s.state, s.attempts, s.result, s.error, s.wake_at,
       coalesce(s.wake_at <= now(), false) AS due
FROM {steps} AS s
WHERE s.op_id = %(id)s::text
ORDER BY s.position;


-- name: step_begin
-- A checkpointed call is about to run its body: record it running, one more attempt (its
-- first start time kept), unless cancellation was requested (then nothing is recorded and the
-- run stops before the step: each step boundary hears of a cancel without a flush). Returns
-- (the attempt, cancel requested); no row: the run no longer holds the operation.
WITH op AS (
    SELECT held_op.cancel_requested FROM {table} AS held_op
    WHERE held_op.id = %(id)s::text AND held_op.lease_token = %(token)s::uuid AND held_op.state = 'running'
),
ins AS (
    INSERT INTO {steps} AS s (op_id, position, name, kind, state, attempts, started_at)
    SELECT %(id)s::text, %(position)s::int, %(name)s::text, 'step', 'running', 1, now()
    FROM op WHERE NOT op.cancel_requested
    ON CONFLICT (op_id, position) DO UPDATE SET attempts = s.attempts + 1, state = 'running', error = NULL
    RETURNING s.attempts
)
SELECT (SELECT ins.attempts FROM ins), op.cancel_requested FROM op;


-- name: step_save
-- Record a step's state at its position: a call's result or final error, a sleep's or a wait's
-- wake time, a patch marker, a child's id. Returns the wake time and whether it has come
-- (a sleep compares the database's clock, never the worker's). No row: not held.
INSERT INTO {steps} AS s (op_id, position, name, kind, state, attempts, started_at, finished_at, wake_at,
                          result, error)
SELECT %(id)s::text, %(position)s::int, %(name)s::text, %(kind)s::text, %(state)s::text, 1, now(),
       CASE WHEN %(state)s::text IN ('succeeded', 'failed', 'timed_out') THEN now() END,
       CASE WHEN %(wait_s)s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %(wait_s)s::float8) END,
       %(result)s::jsonb, %(error)s::jsonb
WHERE {wf_held}
ON CONFLICT (op_id, position) DO UPDATE
SET state = excluded.state, finished_at = excluded.finished_at, result = excluded.result, error = excluded.error,
    wake_at = CASE WHEN %(keep_wake)s::bool THEN s.wake_at ELSE excluded.wake_at END
RETURNING s.wake_at, coalesce(s.wake_at <= now(), false) AS due;


-- name: step_take_signal
-- A wait takes the oldest signal of its name not yet taken (signals of one name are taken in
-- the order they were sent) and records it as the wait's result, in one statement: a signal
-- is taken by one wait, once. No row: none is there (or the run does not hold the operation).
WITH sig AS (
    UPDATE {signals} AS g SET taken_at = now(), taken_by_position = %(position)s::int
    WHERE g.id = (SELECT x.id FROM {signals} AS x
                  WHERE x.op_id = %(id)s::text AND x.name = %(name)s::text AND x.taken_at IS NULL
                  ORDER BY x.id LIMIT 1 FOR UPDATE SKIP LOCKED)
      AND {wf_held}
    RETURNING g.id, g.payload
),
rec AS (
    INSERT INTO {steps} AS s (op_id, position, name, kind, state, attempts, started_at, finished_at, result)
    SELECT %(id)s::text, %(position)s::int, %(name)s::text, 'wait', 'succeeded', 1, now(), now(), sig.payload
    FROM sig
    ON CONFLICT (op_id, position) DO UPDATE SET state = 'succeeded', finished_at = now(), result = excluded.result
    RETURNING s.position
)
SELECT sig.id, sig.payload, (SELECT count(*) FROM rec) AS recorded FROM sig;


-- name: op_suspend
-- A workflow run pauses to sleep or wait: the operation goes back to pending, waiting (what
-- for, until when), its attempt given back (a wait is not a failure) and its lease dropped;
-- its work item is queued again, due at the wake time, the claim's attempt refunded. No
-- thread, connection or lease is held while it waits. A signal that arrived while the run
-- ran (wake_pending) makes a wait for a signal due at once: the run checked for signals before
-- this, so one sent in between would otherwise wait for the timeout. Refused when
-- cancellation was requested (the caller ends it cancelled) or the hold is gone. Only while
-- this worker holds the work item, whose row is locked first.
WITH held AS (
    {item_lock_held:%(item_id)s, %(token)s, {states_running}}
),
s AS (
    UPDATE {table} AS o
    SET state = 'pending', attempts = greatest(o.attempts - 1, 0), claimed_until = NULL, lease_token = NULL,
        wait_kind = %(wait_kind)s::text, wait_name = %(wait_name)s::text,
        wake_at = CASE WHEN o.wake_pending AND %(wait_kind)s::text = 'signal' THEN now()
                       ELSE %(wake_at)s::timestamptz END,
        wake_pending = false,
        units_total = %(units_total)s::int, units_done = %(units_done)s::int, unit = %(unit)s::text,
        message = %(message)s::text, count = greatest(o.count, %(count)s::bigint),
        updated_at = now(), revision = o.revision + 1,
        attempt_log = {attempt_closed:jsonb_build_object('outcome', 'waiting')}
    FROM held
    WHERE o.id = %(id)s AND o.lease_token = %(token)s AND o.state = 'running' AND NOT o.cancel_requested
    RETURNING o.id, o.wake_at
),
item AS (
    {item_wait_until:s, %(item_id)s, s.wake_at}
)
SELECT s.id, s.wake_at, {notify:s.id} FROM s;


-- name: op_signal
-- Send a signal to an unfinished workflow: kept in {signals} until a wait of its name takes
-- it. A workflow waiting for this name is made due now (its work item; idle workers are
-- woken at commit); a running one is marked wake_pending, so the wait it may be about to
-- record ends at once (op_suspend). The work item is locked first (the lock order), so a
-- signal and a suspend are ordered. No row: no unfinished workflow has this id.
WITH target AS (
    SELECT o.id FROM {table} AS o WHERE o.id = %(id)s AND o.workflow AND o.state IN ('pending', 'running')
),
held AS (
    SELECT count(*) AS n FROM ({item_lock_key:%(id)s}) AS locked
),
sig AS (
    INSERT INTO {signals} AS g (op_id, name, payload, sent_at)
    SELECT target.id, %(name)s, %(payload)s::jsonb, now() FROM target
    RETURNING g.id, g.op_id
),
woke AS (
    UPDATE {table} AS o
    SET wake_pending = o.wake_pending OR o.state = 'running', updated_at = now(), revision = o.revision + 1
    FROM sig, held
    WHERE o.id = sig.op_id AND o.state IN ('pending', 'running')
    RETURNING o.id, o.state, o.wait_kind, o.wait_name
),
due AS (
    {item_due_now:(SELECT woke.id FROM woke WHERE woke.state = 'pending' AND woke.wait_kind = 'signal'
                   AND woke.wait_name = %(name)s::text) AS hit, hit.id}
),
told AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT due.queue FROM due) AS q
)
SELECT sig.id, (SELECT count(*) FROM due) AS woken, (SELECT count(*) FROM told) AS told, {notify:sig.op_id}
FROM sig;


-- name: op_fork
-- A new workflow run of the same kind and request as %(source)s, pending with its work item,
-- that starts with a copy of the source's steps before position %(from_step)s (marked copied:
-- they return their recorded results without running) and runs the rest anew. Its own id,
-- so its steps' keys (wf.step_key) differ from the source's. No row: the id is taken, or the
-- source is not a workflow.
WITH src AS (
    SELECT o.* FROM {table} AS o WHERE o.id = %(source)s AND o.workflow
),
ins AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              workflow, forked_from_id, created_at, updated_at)
    SELECT %(id)s, src.kind, src.owner, 'pending', src.queue, src.priority, src.request, src.count_label,
           src.max_attempts, true, src.id, now(), now()
    FROM src
    ON CONFLICT (id) DO NOTHING
    RETURNING {op}
),
copied AS (
    INSERT INTO {steps} AS s (op_id, position, name, kind, state, attempts, started_at, finished_at, wake_at,
                              result, error, copied)
    SELECT ins.id, s.position, s.name, s.kind, s.state, s.attempts, s.started_at, s.finished_at, s.wake_at,
           s.result, s.error, true
    FROM ins, {steps} AS s
    WHERE s.op_id = %(source)s AND s.position < %(from_step)s
    RETURNING s.position
),
item AS (
    {item_insert:(
        SELECT ins.queue, ins.id AS key, NULL::text AS environment_id, ins.priority, now() AS run_after,
               0 AS attempts, ins.max_attempts, jsonb_build_object() AS metadata, NULL::jsonb AS trace_context,
               false AS wire, NULL::text AS group_key
        FROM ins
    )}
    {item_skip_live}
    RETURNING pg_notify(%(queue_channel)s::text, w.queue)
)
SELECT ins.*, (SELECT count(*) FROM copied) AS copied, (SELECT count(*) FROM item) AS enqueued FROM ins;


-- ---------------------------------------------------------------------------------------
-- Dependencies (operations/deps.py): start(..., after=[ids]). An edge in {deps} says
-- operation op_id runs once after_id succeeded. A dependent waits pending with no work item
-- while deps_open (its dependencies not yet succeeded) is above 0, so begin, recover and the
-- lease sweeps never touch it; its dependencies' ends decide it, in the transaction that ends
-- each of them (op_deps_settle), as a batch's children's ends settle it. has_dependents marks
-- an operation with dependents, so the ends of all others skip the decision.
-- Lock order, as everywhere: work items, then operations; among operations, a dependency
-- before its dependents (a start locks its dependencies, an end's decision its dependents).


-- name: op_start_after
-- Record a pending operation that runs after the operations %(after)s (distinct ids that the
-- caller checked exist), its edges and, when none is left to wait for, its work item, in one
-- statement. The dependencies' rows are locked first (an UPDATE, whose RETURNING reads each
-- row as its last committed writer left it), so a dependency ending concurrently is
-- serialised with this start: ended before, it is seen ended; ended after, its end sees this
-- edge. They are locked oldest first (created_at, then id), the order in which an end's
-- decision locks dependents: a dependency is always older than what depends on it, so a start
-- and an end never wait for each other in a cycle. An unfinished dependency is marked has_dependents. deps_open counts the dependencies
-- not yet succeeded; an edge onto one already ended is recorded decided (its end was counted
-- here). When one already failed or was cancelled, the operation is recorded failed at once
-- (dependency_failed, naming it). Nothing is written when a dependency has gone (reaped since
-- the caller's check) or the id is taken: ON CONFLICT DO NOTHING, as op_start.
WITH locked AS (
    SELECT a.id FROM {table} AS a
    WHERE a.id = ANY(%(after)s::text[])
    ORDER BY a.created_at, a.id
    FOR UPDATE OF a
),
dep AS (
    UPDATE {table} AS a SET has_dependents = a.has_dependents OR a.state IN ('pending', 'running')
    FROM locked
    WHERE a.id = locked.id
    RETURNING a.id, a.state, a.error_code
),
v AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE dep.state <> 'succeeded') AS open,
           (array_agg({dep_failed_message:dep.id, dep.state, dep.error_code} ORDER BY dep.id)
                FILTER (WHERE dep.state IN ('failed', 'cancelled')))[1] AS bad
    FROM dep
),
ins AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              workflow, deps_open, error_code, error_message, error_retryable, finished_at,
                              created_at, updated_at)
    SELECT %(id)s, %(kind)s, %(owner)s, CASE WHEN v.bad IS NULL THEN 'pending' ELSE 'failed' END, %(queue)s,
           %(priority)s, %(request)s, %(count_label)s, %(max_attempts)s, %(workflow)s, v.open,
           CASE WHEN v.bad IS NULL THEN '' ELSE 'dependency_failed' END, coalesce(v.bad, ''),
           CASE WHEN v.bad IS NULL THEN NULL ELSE false END, CASE WHEN v.bad IS NULL THEN NULL ELSE now() END,
           now(), now()
    FROM v
    WHERE v.n = cardinality(%(after)s::text[])
    ON CONFLICT (id) DO NOTHING
    RETURNING {op}
),
edge AS (
    INSERT INTO {deps} (op_id, after_id, decided)
    SELECT ins.id, dep.id, dep.state NOT IN ('pending', 'running') FROM ins, dep
    RETURNING after_id
),
item AS (
    {item_insert:(
        SELECT ins.queue, ins.id AS key, NULL::text AS environment_id, ins.priority, now() AS run_after,
               0 AS attempts, ins.max_attempts, jsonb_build_object() AS metadata,
               %(trace_context)s::jsonb AS trace_context, false AS wire, NULL::text AS group_key
        FROM ins
        WHERE ins.state = 'pending' AND ins.deps_open = 0
    )}
    {item_skip_live}
    RETURNING pg_notify(%(queue_channel)s::text, w.queue)
)
SELECT ins.*, (SELECT count(*) FROM edge) AS edges FROM ins;


-- name: op_deps_settle
-- The dependency decision, run in the transaction of every write that ends an operation,
-- right after it (and after the fan-in), with the ended ids: count each ended operation's end
-- on its dependents, once per edge. A succeeded dependency lowers its pending dependents'
-- deps_open, under each dependent's row lock (the UPDATE reads the row as the last committed
-- decision left it, so two dependencies ending at once both count); a dependent reaching 0
-- gets its work item, in this statement (idle workers woken once per queue at commit). A
-- failed or cancelled one ends its pending dependents failed, dependency_failed, naming it
-- and how it ended; the caller runs this statement again on the ids it returns ended (their
-- own dependents), until none.
-- Exactly once: an edge is counted only while its decided is false, and this statement sets
-- it (re-checked under the edge's row lock, so two callers cannot both count it). Edges are
-- locked in id order and dependents oldest first (as op_start_after locks dependencies), so
-- two ends sharing dependents never deadlock. Every edge
-- onto an ended operation is already in this statement's snapshot: a start that adds one
-- locks the dependency's row first and commits before the write that ends it takes that
-- lock, and a start after that sees it ended and records its edge decided.
-- A dependent no longer pending (cancelled while it waited, or failed by another dependency)
-- is left as it is; its edge is marked decided all the same.
WITH open AS (
    SELECT e.id, a.state, a.error_code
    FROM {deps} AS e JOIN {table} AS a ON a.id = e.after_id
    WHERE a.id = ANY(%(ids)s::text[]) AND a.has_dependents AND a.state IN ('succeeded', 'failed', 'cancelled')
      AND NOT e.decided
    ORDER BY e.id
    FOR UPDATE OF e
),
edge AS (
    UPDATE {deps} AS e SET decided = true
    FROM open
    WHERE e.id = open.id AND NOT e.decided
    RETURNING e.op_id, e.after_id, open.state, open.error_code
),
tally AS (
    SELECT e.op_id, count(*) FILTER (WHERE e.state = 'succeeded') AS ok,
           (array_agg({dep_failed_message:e.after_id, e.state, e.error_code} ORDER BY e.after_id)
                FILTER (WHERE e.state <> 'succeeded'))[1] AS bad
    FROM edge AS e
    GROUP BY e.op_id
),
held AS (
    SELECT d.id FROM {table} AS d
    WHERE d.id IN (SELECT tally.op_id FROM tally)
    ORDER BY d.created_at, d.id
    FOR UPDATE OF d
),
settled AS (
    UPDATE {table} AS o
    SET deps_open = o.deps_open - t.ok,
        state = CASE WHEN t.bad IS NULL THEN o.state ELSE 'failed' END,
        error_code = CASE WHEN t.bad IS NULL THEN o.error_code ELSE 'dependency_failed' END,
        error_message = CASE WHEN t.bad IS NULL THEN o.error_message ELSE t.bad END,
        error_retryable = CASE WHEN t.bad IS NULL THEN o.error_retryable ELSE false END,
        finished_at = CASE WHEN t.bad IS NULL THEN o.finished_at ELSE now() END,
        updated_at = now(), revision = o.revision + 1
    FROM tally AS t, held AS h
    WHERE o.id = t.op_id AND h.id = o.id AND o.state = 'pending' AND o.deps_open > 0
    RETURNING o.id, o.state, o.deps_open, o.queue, o.priority, o.max_attempts
),
item AS (
    {item_insert:(
        SELECT s.queue, s.id AS key, NULL::text AS environment_id, s.priority, now() AS run_after,
               0 AS attempts, s.max_attempts, jsonb_build_object() AS metadata, NULL::jsonb AS trace_context,
               false AS wire, NULL::text AS group_key
        FROM settled AS s
        WHERE s.state = 'pending' AND s.deps_open = 0
    )}
    {item_skip_live}
    RETURNING w.queue
),
woke AS (
    SELECT pg_notify(%(queue_channel)s::text, q.queue) FROM (SELECT DISTINCT item.queue FROM item) AS q
)
SELECT s.id, s.state, s.deps_open, (SELECT count(*) FROM woke) AS woken, {notify:s.id}
FROM settled AS s;


-- name: op_deps_due
-- recover: ended operations with an edge never counted on its dependent (only a decision
-- lost between statements leaves one: a runner whose operation gained a dependent while it
-- ran decides right after its end, in a second transaction). Locked, so an operation whose
-- ending transaction is still open is skipped, and concurrent sweeps never decide one twice
-- (op_deps_settle re-checks decided under the edge's lock anyway).
SELECT a.id FROM {table} AS a
WHERE a.id IN (SELECT e.after_id FROM {deps} AS e WHERE NOT e.decided)
  AND a.state IN ('succeeded', 'failed', 'cancelled')
ORDER BY a.finished_at
LIMIT %(limit)s
FOR UPDATE OF a SKIP LOCKED;
