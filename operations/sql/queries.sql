-- Every statement the operations app runs by hand, named entity-first.
-- {table} is the operations table (OPERATIONS TABLE_PREFIX), {op} its column list,
-- {notify:ID} a payload-free pg_notify on OPERATIONS NOTIFY_CHANNEL when some process is
-- watching operation ID (a row in {watches}); nothing when the channel is ''. Gating it
-- matters: a transaction that notifies holds a database-wide lock through its commit, so
-- unwatched operations must not queue their commits behind each other for nobody's benefit.
-- {open_attempt} / {close_attempt} append to / finish the bounded attempt_log.
-- Every write bumps revision (the watcher's change signal) and updated_at.
-- A running operation and its work item share one lease: the operation's claimed_until and
-- the item's lease_expires_at move together, and the item's lease proof is the row's.
-- Lock order: a statement that writes both rows takes the work item's row first, then the
-- operation's (the queue settles items first and tells operations in the same transaction), so
-- a runner's write and a queue rule, an operator or a cancel never deadlock. The item's write
-- comes first and the operation's depends on it: no operation write lands without its item.
-- The work item is never written here: every item write or lock is a fragment of
-- workqueue/sql/fragments.sql (listed at its top), called as {name:args}, e.g.
-- {item_insert:ROWS}, {item_extend_held:ID, TOKEN, LEASE_S}, {item_lock_held:ID, TOKEN, SET},
-- {item_settle:SOURCE, ID, OUTCOME, ERROR}, {lapsed_error:ATTEMPTS, MAX}; {states:NAME} renders
-- a state set of workqueue/states.py.


-- name: op_start
-- Record a pending operation and its work item in one statement (the caller's transaction,
-- or its own). ON CONFLICT DO NOTHING keeps the caller's transaction alive on a duplicate
-- id: nothing is written and the caller reads the existing row. The work item goes in through
-- item_enqueue's own fragment (item_insert): never a wire item (operations queues are not
-- over_wire, a check says so), and idle workers are woken at commit.
WITH ins AS (
    INSERT INTO {table} AS o (id, kind, owner, state, queue, priority, request, count_label, max_attempts,
                              created_at, updated_at)
    VALUES (%(id)s, %(kind)s, %(owner)s, 'pending', %(queue)s, %(priority)s, %(request)s, %(count_label)s,
            %(max_attempts)s, now(), now())
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
-- the same expiry. A requested cancellation is never begun: op_settle_unbegun ends it.
WITH item AS (
    {item_extend_held:%(item_id)s, %(token)s, %(lease)s}
),
began AS (
    UPDATE {table} AS o
    SET state = 'running', attempts = o.attempts + 1,
        claimed_until = item.lease_expires_at, lease_token = %(token)s,
        worker_id = %(worker_id)s::text, started_at = coalesce(o.started_at, now()),
        updated_at = now(), revision = o.revision + 1,
        attempt_log = {open_attempt}
    FROM item
    WHERE o.id = %(id)s
      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until < now()))
      AND o.attempts < o.max_attempts AND NOT o.cancel_requested
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
    {item_lock_held:%(item_id)s, %(token)s, running}
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
-- begin: see RELAXED_FRAGMENT in workqueue/sql.py): write progress,
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


-- name: op_finish
-- Write a terminal state with the final progress and drop the lease; settle the work item.
-- cancel_wins: an error that races a requested cancellation is recorded as cancelled (code
-- cancelled, the error's message kept), since the runner was asked to stop. Only while this
-- worker holds the work item, whose row is locked first.
WITH held AS (
    {item_lock_held:%(item_id)s, %(token)s, held}
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
    RETURNING o.id, o.state
),
item AS (
    {item_settle:f, %(item_id)s,
                 CASE f.state WHEN 'succeeded' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END,
                 %(error_message)s::text}
)
SELECT f.id, f.state, {notify:f.id} FROM f;


-- name: op_release
-- A retryable failure: back to pending with the error recorded, lease dropped; the work item
-- goes back to queued after the retry delay. Refused when cancellation was requested (the
-- caller then finishes it as cancelled). Only while this worker holds the work item, whose
-- row is locked first.
WITH held AS (
    {item_lock_held:%(item_id)s, %(token)s, running}
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
    SET cancel_requested = true,
        state = CASE WHEN o.state = 'pending' THEN 'cancelled' ELSE o.state END,
        error_code = CASE WHEN o.state = 'pending' THEN '' ELSE o.error_code END,
        error_message = CASE WHEN o.state = 'pending' THEN '' ELSE o.error_message END,
        error_retryable = CASE WHEN o.state = 'pending' THEN NULL ELSE o.error_retryable END,
        finished_at = CASE WHEN o.state = 'pending' THEN now() ELSE o.finished_at END,
        claimed_until = CASE WHEN o.state = 'pending' THEN NULL ELSE o.claimed_until END,
        updated_at = now(), revision = o.revision + 1
    FROM held
    WHERE o.id = %(id)s AND (%(owner)s::text IS NULL OR o.owner = %(owner)s::text)
      AND (o.state = 'pending' OR (o.state = 'running' AND NOT o.cancel_requested))
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
-- with no live work item. Locked so concurrent sweeps never re-offer one twice.
SELECT o.id, o.queue, o.attempts, o.max_attempts, o.priority
FROM {table} AS o
WHERE ((o.state = 'pending' AND o.updated_at < coalesce(%(now)s, now()) - make_interval(secs => %(after)s))
    OR (o.state = 'running' AND o.claimed_until < coalesce(%(now)s, now()) - make_interval(secs => %(after)s)))
  AND NOT {item_live_for:o.queue, o.id}
ORDER BY o.updated_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;


-- name: op_reap
-- reap: delete terminal operations finished longer than the retention ago, a batch at a time.
DELETE FROM {table}
WHERE id IN (
    SELECT id FROM {table}
    WHERE state IN ('succeeded', 'failed', 'cancelled')
      AND finished_at < coalesce(%(now)s, now()) - make_interval(secs => %(retention)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);


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
