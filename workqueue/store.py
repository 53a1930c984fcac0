"""The workqueue statements, one function per statement of ``sql/*.sql``, named after it.

Each function is one round trip on Django's connection (it joins the caller's transaction),
takes exactly the statement's parameters as keyword arguments, and returns its rows (or, for
the deletes, how many rows went). Row mapping and error translation are the callers' (the
managers, the wire lane, the sweeps, the dashboard); no other module runs a statement by name.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS
from psycopg.types.json import Jsonb

from workqueue import sql

Row = tuple[Any, ...]
Token = UUID | None
Time = dt.datetime | None


def _run(name: str, params: dict[str, Any], using: str) -> list[Row]:
    return sql.run(name, params, using=using)


def _count(name: str, params: dict[str, Any], using: str) -> int:
    return sql.rowcount(name, params, using=using)


# -- producing work (queries.sql) ---------------------------------------------------------


def item_enqueue(
    *,
    queue: str,
    key: str,
    environment_id: str | None,
    priority: int,
    delay: float | None,
    run_after: Time,
    attempts: int,
    max_attempts: int,
    metadata: Any,
    trace_context: Any,
    over_wire: bool,
    channel: str,
    group: str | None,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``item_enqueue``: the live item of (queue, key), then created; no row for an unknown environment."""
    params = {
        "queue": queue,
        "key": key,
        "environment_id": environment_id,
        "priority": priority,
        "delay": delay,
        "run_after": run_after,
        "attempts": attempts,
        "max_attempts": max_attempts,
        "metadata": metadata,
        "trace_context": trace_context,
        "over_wire": over_wire,
        "channel": channel,
        "group": group,
    }
    return _run("item_enqueue", params, using)


def item_enqueue_many(
    *,
    queues: list[str],
    keys: list[str],
    environment_ids: list[str | None],
    priorities: list[int],
    delays: list[float | None],
    max_attempts: list[int],
    metadatas: list[Any],
    over_wires: list[bool],
    groups: list[str | None],
    trace_context: Any,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``item_enqueue_many``: (id, public_id, queue, key, created) per distinct (queue, key)."""
    params = {
        "queues": queues,
        "keys": keys,
        "environment_ids": environment_ids,
        "priorities": priorities,
        "delays": delays,
        "max_attempts": max_attempts,
        "metadatas": metadatas,
        "over_wires": over_wires,
        "groups": groups,
        "trace_context": trace_context,
    }
    return _run("item_enqueue_many", params, using)


def queue_notify(*, channel: str, queues: list[str], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_notify``: wake the idle workers of these queues at commit."""
    return _run("queue_notify", {"channel": channel, "queues": queues}, using)


# -- the in-process lane (queries.sql, controls.sql) --------------------------------------


def queue_lock_caps(*, queues: list[str], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_lock_caps``: hold these queues' max_running locks for the rest of the transaction."""
    return _run("queue_lock_caps", {"queues": queues}, using)


def queue_with_due_work(*, queues: list[str], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_with_due_work``: which of these queues hold an item a claim could take now."""
    return _run("queue_with_due_work", {"queues": queues}, using)


def queue_names_in_families(*, prefixes: list[str], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_names_in_families``: the queues under these prefixes that hold claimable or held items."""
    return _run("queue_names_in_families", {"prefixes": prefixes}, using)


def item_claim(
    *,
    queues: list[str],
    leases: list[float],
    limit: int,
    worker_id: str,
    relaxed: bool = False,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``item_claim``: the claimed columns of each item handed out or settled, then relaxed_commit."""
    params = {"queues": queues, "leases": leases, "limit": limit, "worker_id": worker_id, "relaxed": relaxed}
    return _run("item_claim", params, using)


def item_claim_one(
    *, id: int, lease: float, worker_id: str, relaxed: bool = False, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``item_claim_one``: the claimed columns of that one queued item, handed out; none if it is not queued."""
    params = {"id": id, "lease": lease, "worker_id": worker_id, "relaxed": relaxed}
    return _run("item_claim_one", params, using)


def item_claim_capped(
    *,
    queues: list[str],
    limits: list[int],
    leases: list[float],
    caps: list[int | None],
    wires: list[bool],
    limit: int,
    worker_id: str,
    relaxed: bool = False,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``item_claim_capped``: ``item_claim``'s rows, no capped queue past its free slots."""
    params = {
        "queues": queues,
        "limits": limits,
        "leases": leases,
        "caps": caps,
        "wires": wires,
        "limit": limit,
        "worker_id": worker_id,
        "relaxed": relaxed,
    }
    return _run("item_claim_capped", params, using)


def item_claim_flow(
    *,
    queues: list[str],
    limits: list[int],
    leases: list[float],
    caps: list[int | None],
    wires: list[bool],
    group_caps: list[int | None],
    rate_ns: list[int | None],
    rate_ss: list[float | None],
    group_rate_ns: list[int | None],
    group_rate_ss: list[float | None],
    limit: int,
    worker_id: str,
    relaxed: bool = False,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``item_claim_flow``: ``item_claim``'s rows, every flow limit kept."""
    params = {
        "queues": queues,
        "limits": limits,
        "leases": leases,
        "caps": caps,
        "wires": wires,
        "group_caps": group_caps,
        "rate_ns": rate_ns,
        "rate_ss": rate_ss,
        "group_rate_ns": group_rate_ns,
        "group_rate_ss": group_rate_ss,
        "limit": limit,
        "worker_id": worker_id,
        "relaxed": relaxed,
    }
    return _run("item_claim_flow", params, using)


def queue_flow_wait(
    *,
    queues: list[str],
    rate_ns: list[int | None],
    rate_ss: list[float | None],
    recheck: float,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``queue_flow_wait``: one row, the seconds until a flow claim is worth trying again (or NULL)."""
    params = {"queues": queues, "rate_ns": rate_ns, "rate_ss": rate_ss, "recheck": recheck}
    return _run("queue_flow_wait", params, using)


# -- the holder's writes (queries.sql) ----------------------------------------------------


def item_extend(*, id: int, token: Token, lease: float, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_extend``: the new expiry; no row when the lease is lost."""
    return _run("item_extend", {"id": id, "token": token, "lease": lease}, using)


def item_extend_many(
    *, ids: list[int], tokens: list[Token], leases: list[float], relaxed: bool = False, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``item_extend_many``: (id, proof, new expiry or NULL when skipped, held, relaxed_commit)
    per pair still held, once for each (an item renewed comes back twice from the statement,
    without and with its expiry). The pairs go sorted by proof, as the statement's binary
    search needs; an item without a proof is not held and is not sent."""
    ordered = _by_proof(ids, tokens)
    params = {
        "ids": [id for _, id, _ in ordered],
        "tokens": [t for t, _, _ in ordered],
        "leases": [leases[n - 1] for _, _, n in ordered],
        "relaxed": relaxed,
    }
    rows: dict[tuple[int, UUID], Row] = {}
    for row in _run("item_extend_many", params, using):
        if row[2] is not None or (row[0], row[1]) not in rows:
            rows[(row[0], row[1])] = row
    return list(rows.values())


def _by_proof(ids: list[int], tokens: list[Token]) -> list[tuple[UUID, int, int]]:
    """(proof, id, position) of each presented pair that has a proof, sorted by proof: what the
    batch statements' binary search over the proofs (the presented_at fragment) needs. Sorted
    on the proofs' integers (PostgreSQL orders uuids by their bytes: the same order), five
    times quicker than comparing UUID objects."""
    keyed = sorted((t.int, t, id, n) for n, (id, t) in enumerate(zip(ids, tokens, strict=True), 1) if t is not None)
    return [(t, id, n) for _, t, id, n in keyed]


def _rounds(ids: list[int], tokens: list[Token]) -> list[list[tuple[UUID, int, int]]]:
    """The pairs of a batch statement that names the rows it wrote by id (settle, give-back),
    as _by_proof gives them, in rounds with no id twice: an old and a new claim of one item,
    which one worker may hold, go in successive statements."""
    rounds: list[list[tuple[UUID, int, int]]] = []
    seen: list[set[int]] = []
    for t, id, n in _by_proof(ids, tokens):
        k = next((k for k, ids_in in enumerate(seen) if id not in ids_in), len(rounds))
        if k == len(rounds):
            rounds.append([])
            seen.append(set())
        seen[k].add(id)
        rounds[k].append((t, id, n))
    return rounds


def item_complete_many(
    *, ids: list[int], tokens: list[Token], outcome: str, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``item_complete_many``: the 1-based position of each pair whose item was settled."""
    settled: list[Row] = []
    for pairs in _rounds(ids, tokens):
        params = {"ids": [p[1] for p in pairs], "tokens": [p[0] for p in pairs], "outcome": outcome}
        at = {p[1]: p[2] for p in pairs}
        settled += [(at[row[0]],) for row in _run("item_complete_many", params, using)]
    return settled


def item_retry(
    *, id: int, token: Token, error: str, delay: float | None, connection_lost: bool, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``item_retry``: its id, back to queued after ``delay``; no row when the proof is stale."""
    params = {"id": id, "token": token, "error": error, "delay": delay, "connection_lost": connection_lost}
    return _run("item_retry", params, using)


def item_fail(*, id: int, token: Token, error: str, connection_lost: bool, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_fail``: its id, failed for good; no row when the proof is stale."""
    return _run("item_fail", {"id": id, "token": token, "error": error, "connection_lost": connection_lost}, using)


def item_connection_losses(*, id: int, token: Token, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_connection_losses``: (losses in a row,) of a held item; no row when the proof is stale."""
    return _run("item_connection_losses", {"id": id, "token": token}, using)


def item_stop_reason(*, id: int, token: Token, attempts: int, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_stop_reason``: (why the holder's proof went,); no row when the item is gone."""
    return _run("item_stop_reason", {"id": id, "token": token, "attempts": attempts}, using)


def item_requeue(*, id: int, token: Token, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_requeue``: its id, queued again and ready now; no row when the proof is stale."""
    return _run("item_requeue", {"id": id, "token": token}, using)


def item_release_many(*, ids: list[int], tokens: list[Token], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_release_many``: (id, proof) of each item given back."""
    released: list[Row] = []
    for pairs in _rounds(ids, tokens):
        proof = {p[1]: p[0] for p in pairs}
        params = {"ids": [p[1] for p in pairs], "tokens": [p[0] for p in pairs]}
        released += [(row[0], proof[row[0]]) for row in _run("item_release_many", params, using)]
    return released


def item_release_lost_connection(*, id: int, token: Token, error: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_release_lost_connection``: its id, given back with the loss recorded; no row when stale."""
    return _run("item_release_lost_connection", {"id": id, "token": token, "error": error}, using)


def item_assert_held(*, id: int, token: Token, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_assert_held``: its id, locked for the transaction; no row when the proof is stale."""
    return _run("item_assert_held", {"id": id, "token": token}, using)


def item_cancel_key(*, key: str, queue: str | None, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_cancel_key``: the items of the key it stopped (cancelled), every column."""
    return _run("item_cancel_key", {"key": key, "queue": queue}, using)


# -- operators (queries.sql, controls.sql) ------------------------------------------------


def item_force_stop(*, ids: list[int], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_force_stop``: the items it stopped (cancelled), every column."""
    return _run("item_force_stop", {"ids": ids}, using)


def item_requeue_now(*, ids: list[int], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_requeue_now``: the items it made ready now, every column."""
    return _run("item_requeue_now", {"ids": ids}, using)


def item_retry_now_many(*, ids: list[int], channel: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_retry_now_many``: (id, notified) of each failed item given a new run."""
    return _run("item_retry_now_many", {"ids": ids, "channel": channel}, using)


def item_run_now_many(*, ids: list[int], channel: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_run_now_many``: (id, notified) of each scheduled item made due now."""
    return _run("item_run_now_many", {"ids": ids, "channel": channel}, using)


def queue_controls_all(*, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_controls_all``: every controls row, by queue name."""
    return _run("queue_controls_all", {}, using)


def queue_controls_write(
    *,
    queue: str,
    fields: list[str],
    paused: bool | None,
    max_running: int | None,
    max_running_per_group: int | None,
    rate_count: int | None,
    rate_period: float | None,
    rate_per_group_count: int | None,
    rate_per_group_period: float | None,
    by: str,
    channel: str,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``queue_controls_write``: the queue's controls row as written."""
    params = {
        "queue": queue,
        "fields": fields,
        "paused": paused,
        "max_running": max_running,
        "max_running_per_group": max_running_per_group,
        "rate_count": rate_count,
        "rate_period": rate_period,
        "rate_per_group_count": rate_per_group_count,
        "rate_per_group_period": rate_per_group_period,
        "by": by,
        "channel": channel,
    }
    return _run("queue_controls_write", params, using)


def queue_depths(*, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_depths``: (queue, due items waiting) per queue with any."""
    return _run("queue_depths", {}, using)


# -- the sweeps: recover and reap (queries.sql, controls.sql) -----------------------------


def maintenance_try_lock(*, name: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``maintenance_try_lock``: one row, whether this transaction got the sweep's lock."""
    return _run("maintenance_try_lock", {"name": name}, using)


def item_finalize_stopping(*, now: Time, limit: int, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_finalize_stopping``: the stopping items it settled, every column."""
    return _run("item_finalize_stopping", {"now": now, "limit": limit}, using)


def item_requeue_lapsed(*, now: Time, limit: int, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``item_requeue_lapsed``: the lapsed wire items it re-offered or failed, every column."""
    return _run("item_requeue_lapsed", {"now": now, "limit": limit}, using)


def item_fail_hard_timeout(
    *, queues: list[str], timeouts: list[float | None], now: Time, limit: int, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``item_fail_hard_timeout``: the held items it failed for overstaying, every column."""
    return _run("item_fail_hard_timeout", {"queues": queues, "timeouts": timeouts, "now": now, "limit": limit}, using)


def item_reap_stopped(
    *,
    queues: list[str],
    retentions: list[float],
    default_retention: float,
    min_retention: float,
    now: Time,
    limit: int,
    using: str = DEFAULT_DB_ALIAS,
) -> int:
    """``item_reap_stopped``: how many stopped items past retention it deleted."""
    params = {
        "queues": queues,
        "retentions": retentions,
        "default_retention": default_retention,
        "min_retention": min_retention,
        "now": now,
        "limit": limit,
    }
    return _count("item_reap_stopped", params, using)


def poller_prune(*, now: Time, window: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """``poller_prune``: how many wire pollers it forgot."""
    return _count("poller_prune", {"now": now, "window": window}, using)


def worker_forget_stale(*, now: Time, older_than: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """``worker_forget_stale``: how many long-unseen worker rows it dropped."""
    return _count("worker_forget_stale", {"now": now, "older_than": older_than}, using)


def maintenance_runs_prune(*, now: Time, older_than: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """``maintenance_runs_prune``: how many old sweep records it forgot."""
    return _count("maintenance_runs_prune", {"now": now, "older_than": older_than}, using)


def queue_starts_prune(*, now: Time, older_than: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """``queue_starts_prune``: how many old rate-limiter starts it forgot."""
    return _count("queue_starts_prune", {"now": now, "older_than": older_than}, using)


# -- workers and schedules (queries.sql) --------------------------------------------------


def worker_beat(
    *,
    id: str,
    host: str,
    pid: int,
    queues: Any,
    state: str,
    processed: int,
    failed: int,
    pool: Any = None,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``worker_beat``: record that a runworker process is alive (no rows). ``pool``: Jsonb."""
    params = {
        "id": id,
        "host": host,
        "pid": pid,
        "queues": queues,
        "state": state,
        "processed": processed,
        "failed": failed,
        "pool": pool if pool is not None else Jsonb({}),
    }
    return _run("worker_beat", params, using)


def schedule_take_due(*, now: Time, limit: int, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``schedule_take_due``: the due schedules, locked, each with the "now" it was taken at."""
    return _run("schedule_take_due", {"now": now, "limit": limit}, using)


def schedule_advance_many(
    *,
    ids: list[int],
    last_slots: list[Time],
    next_slots: list[Time],
    last_queues: list[str],
    last_keys: list[str],
    errors: list[str],
    fired: list[int],
    now: Time,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``schedule_advance_many``: record what a firing pass did (no rows)."""
    params = {
        "ids": ids,
        "last_slots": last_slots,
        "next_slots": next_slots,
        "last_queues": last_queues,
        "last_keys": last_keys,
        "errors": errors,
        "fired": fired,
        "now": now,
    }
    return _run("schedule_advance_many", params, using)


def schedule_next_due(*, now: Time, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``schedule_next_due``: one row, seconds until the earliest schedule is due (or NULL)."""
    return _run("schedule_next_due", {"now": now}, using)


def schedule_notify(*, channel: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``schedule_notify``: wake every scheduler loop at commit."""
    return _run("schedule_notify", {"channel": channel}, using)


def schedule_sync_lock(*, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``schedule_sync_lock``: hold the settings-sync lock for the rest of the transaction."""
    return _run("schedule_sync_lock", {}, using)


# -- the dashboard (dashboard.sql) --------------------------------------------------------


def dashboard_clock(*, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``dashboard_clock``: one row, the database's statement timestamp."""
    return _run("dashboard_clock", {}, using)


def queue_stats(*, now: Time, stuck_after: float, held_back: list[str], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_stats``: the unsettled counts of each queue with any, as of ``now``."""
    return _run("queue_stats", {"now": now, "stuck_after": stuck_after, "held_back": held_back}, using)


def stats_minutes(*, now: Time, window: float, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``stats_minutes``: (queue, period, succeeded, failed, wait_hist, run_hist) per minute."""
    return _run("stats_minutes", {"now": now, "window": window}, using)


def stats_hours(*, now: Time, window: float, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``stats_hours``: (queue, period, succeeded, failed, wait_hist, run_hist) per hour."""
    return _run("stats_hours", {"now": now, "window": window}, using)


def stats_window(*, now: Time, backfill: float, lag: float, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``stats_window``: one row, (since, until) of the next rollup."""
    return _run("stats_window", {"now": now, "backfill": backfill, "lag": lag}, using)


def stats_rollup_minutes(*, since: dt.datetime, until: dt.datetime, using: str = DEFAULT_DB_ALIAS) -> int:
    """``stats_rollup_minutes``: how many minute rows of [since, until) were written."""
    return _count("stats_rollup_minutes", {"since": since, "until": until}, using)


def stats_rollup_hours(*, since: dt.datetime, using: str = DEFAULT_DB_ALIAS) -> int:
    """``stats_rollup_hours``: how many hour rows (from the one holding since) were rewritten."""
    return _count("stats_rollup_hours", {"since": since}, using)


def stats_prune(*, now: Time, minutes_kept: float, hours_kept: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """``stats_prune``: how many rollup rows past their keep were deleted."""
    params = {"now": now, "minutes_kept": minutes_kept, "hours_kept": hours_kept}
    return _count("stats_prune", params, using)


def worker_liveness(*, now: Time, stale_after: float, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``worker_liveness``: (queue or NULL for all, alive, stale) workers."""
    return _run("worker_liveness", {"now": now, "stale_after": stale_after}, using)


def queue_schedules(*, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_schedules``: (queue, active schedules feeding it)."""
    return _run("queue_schedules", {}, using)


def environment_stats(*, now: Time, window: float, limit: int, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``environment_stats``: depth, pending and polling workers of the first self_hosted environments."""
    return _run("environment_stats", {"now": now, "window": window, "limit": limit}, using)


def maintenance_latest(*, now: Time, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``maintenance_latest``: the latest run and latest success of each sweep, with their ages."""
    return _run("maintenance_latest", {"now": now}, using)


def table_row_estimate(*, table: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``table_row_estimate``: one row, the planner's row count for the table (-1: never analyzed)."""
    return _run("table_row_estimate", {"table": table}, using)


# -- the wire lane (wire.sql, controls.sql) -----------------------------------------------


def wire_auth_environment_key(*, digest: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_auth_environment_key``: (id, kind, key_hash) of the environment with this key."""
    return _run("wire_auth_environment_key", {"digest": digest}, using)


def wire_auth_api_key(*, digest: str, environment_id: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_auth_api_key``: (key_hash, revoked, environment id, kind, usable) for this API key."""
    return _run("wire_auth_api_key", {"digest": digest, "environment_id": environment_id}, using)


def wire_poll(
    *,
    environment_id: str,
    reserve_s: float,
    worker_id: str,
    batch: int,
    full_queues: list[str],
    flow_queues: list[str],
    blocked_groups: list[str],
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``wire_poll``: (verdict, every column) of the item handed out and those settled on the way."""
    params = {
        "environment_id": environment_id,
        "reserve_s": reserve_s,
        "worker_id": worker_id,
        "batch": batch,
        "full_queues": full_queues,
        "flow_queues": flow_queues,
        "blocked_groups": blocked_groups,
    }
    return _run("wire_poll", params, using)


def wire_full_queues(*, queues: list[str], caps: list[int | None], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_full_queues``: the capped wire queues with no free slot."""
    return _run("wire_full_queues", {"queues": queues, "caps": caps}, using)


def queue_flow_blocked(
    *,
    queues: list[str],
    caps: list[int | None],
    group_caps: list[int | None],
    rate_ns: list[int | None],
    rate_ss: list[float | None],
    group_rate_ns: list[int | None],
    group_rate_ss: list[float | None],
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``queue_flow_blocked``: one row, (queues that may hand nothing out, groups with no room)."""
    params = {
        "queues": queues,
        "caps": caps,
        "group_caps": group_caps,
        "rate_ns": rate_ns,
        "rate_ss": rate_ss,
        "group_rate_ns": group_rate_ns,
        "group_rate_ss": group_rate_ss,
    }
    return _run("queue_flow_blocked", params, using)


def wire_record_poll(
    *, environment_id: str, worker_id: str, window_s: float, relaxed: bool = False, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``wire_record_poll``: a row when the worker id was known (its last_seen moved), none when new."""
    params = {"environment_id": environment_id, "worker_id": worker_id, "window_s": window_s, "relaxed": relaxed}
    return _run("wire_record_poll", params, using)


def wire_lock_pollers(*, environment_id: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_lock_pollers``: hold the environment's poller lock for the rest of the transaction."""
    return _run("wire_lock_pollers", {"environment_id": environment_id}, using)


def wire_record_new_poller(
    *, environment_id: str, worker_id: str, window_s: float, max_pollers: int, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``wire_record_new_poller``: one row, (self_hosted, added)."""
    params = {
        "environment_id": environment_id,
        "worker_id": worker_id,
        "window_s": window_s,
        "max_pollers": max_pollers,
    }
    return _run("wire_record_new_poller", params, using)


def wire_ack_lock(*, environment_id: str, work_id: str, queues: list[str], using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_ack_lock``: hold the item's queue's max_running lock, when it is one of ``queues``."""
    return _run("wire_ack_lock", {"environment_id": environment_id, "work_id": work_id, "queues": queues}, using)


def item_ack_flow_check(
    *,
    environment_id: str,
    work_id: str,
    queues: list[str],
    caps: list[int | None],
    group_caps: list[int | None],
    rate_ns: list[int | None],
    rate_ss: list[float | None],
    group_rate_ns: list[int | None],
    group_rate_ss: list[float | None],
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``item_ack_flow_check``: (queue, paused, has_slot, has_rate, has_group_room, rated), or no row."""
    params = {
        "environment_id": environment_id,
        "work_id": work_id,
        "queues": queues,
        "caps": caps,
        "group_caps": group_caps,
        "rate_ns": rate_ns,
        "rate_ss": rate_ss,
        "group_rate_ns": group_rate_ns,
        "group_rate_ss": group_rate_ss,
    }
    return _run("item_ack_flow_check", params, using)


def wire_ack(
    *,
    environment_id: str,
    work_id: str,
    startup_s: float,
    worker_id: str,
    queues: list[str],
    caps: list[int | None],
    using: str = DEFAULT_DB_ALIAS,
) -> list[Row]:
    """``wire_ack``: (due, others_reservation, queue, run_after, the acked item's columns or NULLs)."""
    params = {
        "environment_id": environment_id,
        "work_id": work_id,
        "startup_s": startup_s,
        "worker_id": worker_id,
        "queues": queues,
        "caps": caps,
    }
    return _run("wire_ack", params, using)


def queue_start_record(*, id: int, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``queue_start_record``: log an acked item's start in its queue's rate window (no rows)."""
    return _run("queue_start_record", {"id": id}, using)


def wire_heartbeat(
    *, environment_id: str, work_id: str, claim: bool, expected: Time, ttl_s: float, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``wire_heartbeat``: the item as beaten, every column; no row when refused."""
    params = {
        "environment_id": environment_id,
        "work_id": work_id,
        "claim": claim,
        "expected": expected,
        "ttl_s": ttl_s,
    }
    return _run("wire_heartbeat", params, using)


def wire_stop(*, environment_id: str, work_id: str, force: bool, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_stop``: the item as stopped (or stopping), every column; no row when refused."""
    return _run("wire_stop", {"environment_id": environment_id, "work_id": work_id, "force": force}, using)


def wire_update_metadata(
    *, environment_id: str, work_id: str, upserts: Any, deletes: list[str], max_keys: int, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``wire_update_metadata``: the item with its metadata merged, every column; no row when too many keys."""
    params = {
        "environment_id": environment_id,
        "work_id": work_id,
        "upserts": upserts,
        "deletes": deletes,
        "max_keys": max_keys,
    }
    return _run("wire_update_metadata", params, using)


def wire_get(*, environment_id: str, work_id: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_get``: the wire-visible item, every column, then the whole seconds left on its lease."""
    return _run("wire_get", {"environment_id": environment_id, "work_id": work_id}, using)


def wire_list_page(
    *, environment_id: str, before_created: dt.datetime, before_id: int, limit: int, using: str = DEFAULT_DB_ALIAS
) -> list[Row]:
    """``wire_list_page``: the environment's wire items before the cursor, newest first, every column."""
    params = {
        "environment_id": environment_id,
        "before_created": before_created,
        "before_id": before_id,
        "limit": limit,
    }
    return _run("wire_list_page", params, using)


def wire_stats(*, environment_id: str | None, window_s: float, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``wire_stats``: (environment id, depth, pending, oldest queued at, workers polling) per environment."""
    return _run("wire_stats", {"environment_id": environment_id, "window_s": window_s}, using)
