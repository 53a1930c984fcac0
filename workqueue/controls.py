"""Flow control: operators' runtime overrides of a queue's limits, and pause / resume.

The settings (``WORKQUEUE["QUEUES"][name]``) give each queue its defaults: ``max_running``,
``max_running_per_group``, ``rate`` and ``rate_per_group``. An operator overrides any of them
at runtime, or pauses the queue, with ``manage.py queues`` or the queue dashboard; the
override lives in one row of ``work_queue_controls`` per queue, where NULL means "use the
setting". Enforcement is never here: the claim, poll and ack statements read that row
themselves (``sql/controls.sql``), under the queue's advisory lock, so a change committed on
one host binds every worker at once.

What this module caches is only *which claim statement to use*: a queue with no controls
row and no per-group or rate limit in its settings takes the plain claim, which pays
nothing for flow control, and a plain claim that meets a queue an operator has just put
under control claims nothing from it (``{flow_gated}``), so a stale cache can only delay
a claim, never break a limit. A change NOTIFYs its queue and ``#controls``, so idle workers
look again at once and every process drops its cached view.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, transaction

from workqueue import handlers, store, values
from workqueue.conf import QUEUE_NAME, QueueSettings, format_rate, wq_settings
from workqueue.exceptions import InvalidInput

#: The fields an operator may override (``queues set --clear FIELD`` names them).
FIELDS = ("max_running", "max_running_per_group", "rate", "rate_per_group")
CONTROLS_NOTIFY = "#controls"


@dataclass(frozen=True, slots=True)
class Control:
    """One queue's overrides as stored (None: use the setting)."""

    queue: str
    paused: bool = False
    max_running: int | None = None
    max_running_per_group: int | None = None
    rate: tuple[int, float] | None = None
    rate_per_group: tuple[int, float] | None = None
    updated_at: object = None
    updated_by: str = ""

    @classmethod
    def from_row(cls, row) -> Control:
        return cls(
            queue=row[0],
            paused=row[1],
            max_running=row[2],
            max_running_per_group=row[3],
            rate=(row[4], row[5]) if row[4] is not None else None,
            rate_per_group=(row[6], row[7]) if row[6] is not None else None,
            updated_at=row[8],
            updated_by=row[9],
        )

    @property
    def gated(self) -> bool:
        """Whether this row gives the claim anything to enforce."""
        return self.paused or any(getattr(self, f) is not None for f in FIELDS)


@dataclass(frozen=True, slots=True)
class Effective:
    """A queue's limits as the claim applies them, and where each comes from."""

    queue: str
    paused: bool
    values: dict  # field -> value (None: no limit)
    overridden: frozenset  # the fields an operator set
    changed_at: object = None  # the controls row's last change, and who made it
    changed_by: str = ""

    def shown(self, field: str) -> str:
        """The value as an operator writes it ('' for no limit)."""
        value = self.values[field]
        if field in ("rate", "rate_per_group"):
            return format_rate(value)
        return "" if value is None else str(value)

    def source(self, field: str) -> str:
        return "override" if field in self.overridden else "settings"


def all_controls(*, using: str = DEFAULT_DB_ALIAS) -> dict[str, Control]:
    """Every controls row, by queue name (read now, not cached)."""
    return {row[0]: Control.from_row(row) for row in store.queue_controls_all(using=using)}


def effective(conf: QueueSettings, control: Control | None) -> Effective:
    """Combine a queue's settings with its controls row (NULL override: the setting)."""
    values, overridden = {}, set()
    for f in FIELDS:
        override = getattr(control, f) if control is not None else None
        if override is not None:
            overridden.add(f)
        values[f] = override if override is not None else getattr(conf, f)
    return Effective(
        conf.name,
        bool(control and control.paused),
        values,
        frozenset(overridden),
        changed_at=control.updated_at if control is not None else None,
        changed_by=control.updated_by if control is not None else "",
    )


def known_queues(*, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Queues an operator may control: in the settings, declared by an app, with a handler
    registered in this process, or already under a controls row."""
    settings = wq_settings()
    return sorted({*settings.queues, *settings.declared, *handlers.queues(), *all_controls(using=using)})


def _as_json(field: str, value):
    if value is None:
        return None
    return format_rate(value) if field in ("rate", "rate_per_group") else value


def describe_all(*, using: str = DEFAULT_DB_ALIAS) -> list[dict]:
    """Every known queue (and any with waiting items) as ``queues list`` shows it: paused, each
    limit's effective value and whether it is the setting or an override, and its depth (due
    items waiting)."""
    settings = wq_settings()
    rows = all_controls(using=using)
    depth: dict[str, int] = dict(store.queue_depths(using=using))
    out = []
    for name in sorted({*known_queues(using=using), *depth}):
        eff = effective(settings.queue(name), rows.get(name))
        out.append(
            {
                "name": name,
                "paused": eff.paused,
                "depth": depth.get(name, 0),
                **{f: {"value": _as_json(f, eff.values[f]), "source": eff.source(f)} for f in FIELDS},
            }
        )
    return out


def describe(queue: str, *, using: str = DEFAULT_DB_ALIAS) -> dict:
    """One queue as ``describe_all`` shows it."""
    return next(r for r in describe_all(using=using) if r["name"] == queue)


def held_back_queues(*, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Queues whose waiting items wait by design: paused, or under a per-group cap or a rate
    (from the settings or an override). Their queued items are not stuck."""
    settings = wq_settings()
    rows = all_controls(using=using)
    names = {c.name for c in settings.known_queues() if settings.flow_limited(c)}
    for name, c in rows.items():
        if c.paused or c.max_running_per_group is not None or c.rate is not None or c.rate_per_group is not None:
            names.add(name)
    return sorted(names)


# -- the claim path's cache ---------------------------------------------------------------

_lock = threading.Lock()
_cache: dict[str, tuple[float, frozenset]] = {}  # alias -> (read at, gated queue names)


def invalidate() -> None:
    """Forget the cached view of the controls (a ``#controls`` NOTIFY arrived)."""
    with _lock:
        _cache.clear()


def gated_queues(*, using: str = DEFAULT_DB_ALIAS) -> frozenset:
    """Names of the queues whose controls row gives the claim something to enforce, as read
    at most ``WORKQUEUE["CONTROLS_CACHE"]`` seconds ago."""
    now = time.monotonic()
    with _lock:
        hit = _cache.get(using)
    if hit is not None and now - hit[0] < wq_settings().controls_cache:
        return hit[1]
    gated = frozenset(name for name, c in all_controls(using=using).items() if c.gated)
    with _lock:
        _cache[using] = (now, gated)
    return gated


def needs_flow(confs: list[QueueSettings], *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether a claim over these queues must take the flow path (item_claim_flow)."""
    settings = wq_settings()
    if any(settings.flow_limited(c) for c in confs):
        return True
    gated = gated_queues(using=using)
    return bool(gated) and any(c.name in gated for c in confs)


def wire_flow_queues(*, fresh: bool = False, using: str = DEFAULT_DB_ALIAS) -> list[QueueSettings]:
    """The known ``over_wire`` queues under flow control: a per-group cap or a rate in the
    settings, or an operator's controls row (``fresh``: read now, not from the cache)."""
    settings = wq_settings()
    if fresh:
        gated = frozenset(name for name, c in all_controls(using=using).items() if c.gated)
    else:
        gated = gated_queues(using=using)
    return [q for q in settings.known_queues() if q.over_wire and (settings.flow_limited(q) or q.name in gated)]


def flow_params(confs: list[QueueSettings]) -> dict:
    """The settings' limits, as the arrays item_claim_flow and queue_flow_wait take."""
    return {
        "group_caps": [c.max_running_per_group for c in confs],
        "rate_ns": [c.rate[0] if c.rate else None for c in confs],
        "rate_ss": [c.rate[1] if c.rate else None for c in confs],
        "group_rate_ns": [c.rate_per_group[0] if c.rate_per_group else None for c in confs],
        "group_rate_ss": [c.rate_per_group[1] if c.rate_per_group else None for c in confs],
    }


def flow_wait(confs: list[QueueSettings], *, using: str = DEFAULT_DB_ALIAS) -> float | None:
    """Seconds until a flow claim that took nothing is worth trying again (None: no limit is
    holding back due work; wait for a NOTIFY or the poll interval)."""
    p = flow_params(confs)
    rows = store.queue_flow_wait(
        queues=[c.name for c in confs],
        rate_ns=p["rate_ns"],
        rate_ss=p["rate_ss"],
        recheck=wq_settings().flow_recheck,
        using=using,
    )
    return rows[0][0] if rows else None


# -- operators' verbs ---------------------------------------------------------------------


def check_known(queue: object, *, using: str = DEFAULT_DB_ALIAS) -> str:
    """The queue name, if it is one an operator may control; InvalidInput otherwise."""
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise InvalidInput(f"queue name {queue!r} is not valid (letters, digits, '.', '_', ':' or '-')")
    known = known_queues(using=using)
    if queue not in known:
        shown = ", ".join(known[:12]) + (f" and {len(known) - 12} more" if len(known) > 12 else "")
        raise InvalidInput(
            f"unknown queue {queue!r}: known queues are {shown or '(none)'}; add it to WORKQUEUE['QUEUES'] first"
        )
    return queue


def parse_limit(field: str, value: object) -> object:
    """Check one override value (a count >= 1, or a rate like '50/s'), an int or text in ASCII
    digits (``workqueue.values``); InvalidInput if bad."""
    if field not in FIELDS:
        raise InvalidInput(f"unknown field {field!r}; the fields are {', '.join(FIELDS)}")
    what = f"--{field.replace('_', '-')}"
    if field in ("rate", "rate_per_group"):
        return values.rate(value, what=what)
    return values.count(value, what=what)


def write(
    queue: str,
    *,
    paused: bool | None = None,
    limits: dict | None = None,
    clear=(),
    by: str = "",
    using: str = DEFAULT_DB_ALIAS,
) -> Control:
    """Change a queue's controls: pause or resume, set overrides (``limits``: field -> value,
    checked here), or clear them back to the settings. All checked before anything is
    written; InvalidInput names the first bad value."""
    check_known(queue, using=using)
    limits = {f: parse_limit(f, v) for f, v in (limits or {}).items()}
    clear = list(clear)
    for f in clear:
        if f not in FIELDS:
            raise InvalidInput(f"--clear {f!r}: the fields are {', '.join(FIELDS)}")
        if f in limits:
            raise InvalidInput(f"{f} is both set and cleared; choose one")
    fields = [*limits, *clear] + (["paused"] if paused is not None else [])
    if not fields:
        raise InvalidInput("nothing to change: give a limit to set, --clear FIELD, or pause/resume")
    values = {**dict.fromkeys(FIELDS), **limits}
    rate, group_rate = values["rate"], values["rate_per_group"]
    with transaction.atomic(using=using):
        row = store.queue_controls_write(
            queue=queue,
            fields=fields,
            paused=paused,
            max_running=values["max_running"],
            max_running_per_group=values["max_running_per_group"],
            rate_count=rate[0] if rate else None,
            rate_period=rate[1] if rate else None,
            rate_per_group_count=group_rate[0] if group_rate else None,
            rate_per_group_period=group_rate[1] if group_rate else None,
            by=by[:200],
            channel=wq_settings().notify_channel,
            using=using,
        )[0]
    invalidate()
    return Control.from_row(row)


def pause(queue: str, *, by: str = "", using: str = DEFAULT_DB_ALIAS) -> Control:
    """Stop handing out the queue's items, fleet-wide (enqueue still accepted)."""
    return write(queue, paused=True, by=by, using=using)


def resume(queue: str, *, by: str = "", using: str = DEFAULT_DB_ALIAS) -> Control:
    """Let a paused queue's items flow again; its idle workers wake at once."""
    return write(queue, paused=False, by=by, using=using)
