-- The operation fragments: pieces of SQL that more than one statement of
-- operations/sql/queries.sql writes the same way (operations/store.py loads them on top of
-- workqueue's; the syntax is workqueue/sql/fragments.sql's). Generated in operations/store.py:
-- {table}, {watches}, {steps}, {signals} and {deps} (the tables' names, from OPERATIONS TABLE_PREFIX) and the column lists
-- {op}, {op_light} (without request and attempt log) and {op_run} (without the attempt log).
--
-- Fragments here:
--   {notify:ID}          a pg_notify when some process watches operation ID
--   {open_attempt}       the attempt_log with a new attempt appended (bounded)
--   {close_attempt}      the attempt_log with its last attempt finished (%(attempt)s merged in)
--   {close_released}     the same, for an attempt whose work was given back
--   {op_cancelable:O}    whether operation row O may be cancelled (a boolean)
--   {op_cancel_set:O}    the SET list of the cancel of operation row O
--   {wf_held}            whether the run writing a workflow step holds operation %(id)s
--   {dep_failed_message:ID, STATE, CODE}  a dependent's error_message when dependency ID ended STATE


-- fragment: notify(op_id)
-- A payload-free pg_notify on OPERATIONS NOTIFY_CHANNEL (%(channel)s) when some process is
-- watching operation OP_ID (a live row in {watches}), as an output column; nothing when the
-- channel is ''. Gated because a transaction that notifies holds a database-wide lock through
-- its commit: unwatched operations must not queue their commits behind each other.
(SELECT pg_notify(%(channel)s::text, '')
 WHERE %(channel)s::text <> ''
   AND EXISTS (SELECT 1 FROM {watches} AS watch WHERE watch.op_id = $op_id AND watch.until > now()))
    AS notified


-- fragment: open_attempt()
-- The attempt_log with a new attempt (number, worker, start) appended, the oldest dropped
-- when it already holds 20: the log stays bounded however often an operation is retried.
(CASE WHEN jsonb_array_length(o.attempt_log) >= 20 THEN o.attempt_log - 0 ELSE o.attempt_log END)
|| jsonb_build_array(jsonb_build_object(
       'number', o.attempts + 1, 'worker_id', %(worker_id)s::text, 'started_at', now()))


-- fragment: attempt_closed(extra)
-- The attempt_log with its last attempt finished now and the jsonb object EXTRA merged into
-- it (an empty log stays empty).
CASE WHEN jsonb_array_length(o.attempt_log) = 0 THEN o.attempt_log
     ELSE jsonb_set(o.attempt_log, ARRAY[(jsonb_array_length(o.attempt_log) - 1)::text],
                    (o.attempt_log -> -1) || jsonb_build_object('finished_at', now()) || $extra)
END


-- fragment: close_attempt()
-- The last attempt finished, with what the runner reports of it (%(attempt)s).
{attempt_closed:%(attempt)s::jsonb}


-- fragment: close_released()
-- The last attempt finished as released (its work item was given back, to run again).
{attempt_closed:jsonb_build_object('outcome', 'released')}


-- fragment: op_cancelable(o)
-- Whether a cancel of operation row O (an alias of {table}) changes it: pending, or running
-- and not yet asked to stop (a repeat on a running one changes nothing, no revision bump).
($o.state = 'pending' OR ($o.state = 'running' AND NOT $o.cancel_requested))


-- fragment: op_cancel_set(o)
-- The cancel of operation row O, as an UPDATE's SET list (op_cancel, op_cancel_children):
-- pending, it is cancelled outright (nothing started) and a retry's error is cleared, since
-- that error is not how it ended; running, only the flag is set and its runner decides.
cancel_requested = true,
state = CASE WHEN $o.state = 'pending' THEN 'cancelled' ELSE $o.state END,
error_code = CASE WHEN $o.state = 'pending' THEN '' ELSE $o.error_code END,
error_message = CASE WHEN $o.state = 'pending' THEN '' ELSE $o.error_message END,
error_retryable = CASE WHEN $o.state = 'pending' THEN NULL ELSE $o.error_retryable END,
finished_at = CASE WHEN $o.state = 'pending' THEN now() ELSE $o.finished_at END,
claimed_until = CASE WHEN $o.state = 'pending' THEN NULL ELSE $o.claimed_until END,
updated_at = now(), revision = $o.revision + 1


-- fragment: wf_held()
-- Whether the run writing a workflow's step still holds operation %(id)s: it is running under
-- the lease proof %(token)s (a boolean). A run that lost its hold records nothing.
EXISTS (SELECT 1 FROM {table} AS held_op
        WHERE held_op.id = %(id)s::text AND held_op.lease_token = %(token)s::uuid AND held_op.state = 'running')


-- fragment: dep_failed_message(id, state, code)
-- What a dependent that can no longer run says of its dependency ID, which ended STATE
-- (failed or cancelled) with error code CODE: its error_message.
format('dependency %%s ended %%s%%s; it will not run: start it again once its dependencies can succeed',
       $id, $state, CASE WHEN $code <> '' THEN format(' (%%s)', $code) ELSE '' END)
