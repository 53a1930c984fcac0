-- op_get_many, from operations/sql/queries.sql (expanded)
SELECT o.id, o.kind, o.owner, o.state, o.queue, o.priority, o.units_total, o.units_done, o.unit,
    o.message, o.count_label, o.count, o.result_uri, o.result_detail, o.error_code, o.error_message,
    o.error_retryable, o.attempts, o.max_attempts, o.cancel_requested, o.revision, o.claimed_until,
    o.lease_token, o.worker_id, o.created_at, o.updated_at, o.started_at, o.finished_at, o.parent_id,
    o.position, o.follows_id, o.fanned_in, o.children_total, o.children_succeeded, o.children_failed,
    o.children_cancelled, o.workflow, o.wait_kind, o.wait_name, o.wake_at, o.wake_pending,
    o.forked_from_id, o.deps_open, o.has_dependents FROM operations o WHERE o.id = ANY(%(ids)s::text[]);
