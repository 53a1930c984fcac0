-- The operation fragments: pieces of SQL that more than one statement of
-- operations/sql/queries.sql writes the same way (operations/store.py loads them with
-- workqueue's shared ones; the syntax is workqueue/sql/fragments.sql's).
--
-- Fragments here:
--   {op_cancelable:O}    whether operation row O may be cancelled (a boolean)
--   {op_cancel_set:O}    the SET list of the cancel of operation row O


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
