"""The workflow parts of an operation's admin page: its steps as a timeline, what it waits
for and until when, its signals, "Fork from this step" (an object action of the page: the change permission,
confirmed), and for
``start(..., after=[...])`` a small graph of the operations it waits on and that wait on it.

Kept apart from ``operations.admin`` (which calls these): the page's data in one place, read
with one query per table."""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Q
from django.urls import reverse

from operations import workflows
from operations.exceptions import OperationsError
from operations.models import Operation
from workqueue.exceptions import InvalidInput

PREVIEW = 120


def preview(value) -> str:
    """A short one-line rendering of a JSON value (the full value is on hover)."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


def _duration(step) -> str:
    taken = step.duration
    return "" if taken is None else f"{taken.total_seconds():.3f} s"


def page_context(op: Operation, *, fork_url=None) -> dict:
    """What the workflow panel shows for ``op``."""
    steps = workflows.steps(op.id)
    rows = [
        {
            "position": s.position,
            "name": s.name,
            "kind": s.kind,
            "state": s.state,
            "attempts": s.attempts,
            "started_at": s.started_at,
            "finished_at": s.finished_at,
            "duration": _duration(s),
            "wake_at": s.wake_at,
            "result": preview(s.result),
            "result_full": json.dumps(s.result, indent=2, ensure_ascii=False) if s.result is not None else "",
            "error": " ".join(filter(None, [(s.error or {}).get("code"), (s.error or {}).get("message")])),
            "copied": s.copied,
            "fork_url": fork_url(s.position) if fork_url is not None else None,
        }
        for s in steps
    ]
    return {
        "steps": rows,
        "signals": [
            {
                "name": g.name,
                "sent_at": g.sent_at,
                "taken_at": g.taken_at,
                "taken_by": g.taken_by_position,
                "payload": preview(g.payload),
            }
            for g in workflows.signals(op.id)
        ],
        "waiting": op.state == "pending" and bool(op.wait_kind),
        "wait_kind": op.wait_kind,
        "wait_name": op.wait_name,
        "wake_at": op.wake_at,
        "forked_from": op.forked_from_id,
        "forked_from_url": reverse("admin:operations_operation_change", args=[op.forked_from_id])
        if op.forked_from_id
        else None,
        "can_fork": fork_url is not None,
    }


MAX_NODES = 12  # per side of the dependency graph; the rest are counted


def dependency_graph(op: Operation) -> dict | None:
    """The operations ``op`` waits on (left) and that wait on it (right), as an inline SVG's
    boxes and lines; None when it has neither. Two index reads and one read of their rows."""
    from operations.models import OperationDependency

    edges = OperationDependency.objects.filter(Q(op_id=op.pk) | Q(after_id=op.pk)).values_list("op_id", "after_id")
    before = sorted({after for dependent, after in edges if dependent == op.pk})
    after = sorted({dependent for dependent, dep in edges if dep == op.pk})
    if not before and not after:
        return None
    shown = {
        o.pk: o
        for o in Operation.objects.filter(pk__in=[*before[:MAX_NODES], *after[:MAX_NODES]]).only("kind", "state")
    }
    row_h, width, box_w = 28, 720, 220
    rows = max(len(before[:MAX_NODES]), len(after[:MAX_NODES]), 1)
    height = rows * row_h + 8
    centre = height / 2

    def nodes(ids, x):
        out = []
        for n, op_id in enumerate(ids[:MAX_NODES]):
            other = shown.get(op_id)
            y = 4 + n * row_h + (height - 8 - len(ids[:MAX_NODES]) * row_h) / 2
            out.append(
                {
                    "x": x,
                    "y": y,
                    "ty": y + 17,
                    "cy": y + 12,
                    "id": op_id,
                    "label": f"{other.kind if other else '(reaped)'} · {other.state if other else ''}".strip(" ·"),
                    "state": other.state if other else "gone",
                    "url": reverse("admin:operations_operation_change", args=[op_id]),
                }
            )
        return out

    left, right = nodes(before, 0), nodes(after, width - box_w)
    return {
        "width": width,
        "height": height,
        "box_w": box_w,
        "mid_x": (width - box_w) / 2,
        "mid_y": centre - 12,
        "mid_ty": centre + 5,
        "centre": centre,
        "left": left,
        "right": right,
        "left_edge": box_w,
        "right_edge": width - box_w,
        "more_before": max(0, len(before) - MAX_NODES),
        "more_after": max(0, len(after) - MAX_NODES),
        "self_label": f"{op.kind} · {op.state}",
        "waiting": op.deps_open,
    }


class WorkflowFilter(admin.SimpleListFilter):
    """Workflows only, or the ones waiting now (through operations_waiting_idx)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request, model_admin):
        return [("all", "workflows"), ("waiting", "waiting")]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "all":
            return queryset.filter(workflow=True)
        if value == "waiting":
            return queryset.filter(state="pending").exclude(wait_kind="")
        return queryset


def explain_fork(op: Operation, from_step: str | None) -> str:
    """What "Fork from this step" will do, said on its confirmation page."""
    try:
        step = _step(from_step)
    except InvalidInput as exc:
        return f"{exc}: nothing will be forked."
    copied = [f"{s.position}: {s.name}" for s in workflows.steps(op.id) if s.position < step]
    kept = f"Steps {', '.join(copied)} return what they recorded here, without running; " if copied else ""
    return f"A new run of {op.kind} with this one's request starts now. {kept}every step from {step} on runs again."


def fork(op: Operation, from_step: str) -> tuple[str, str]:
    """Fork ``op`` from step ``from_step``; (what to say, the new run's page)."""
    try:
        new = workflows.fork(op.id, from_step=_step(from_step))
    except OperationsError as exc:
        raise InvalidInput(str(exc)) from None
    return f"Forked {op.id} from step {from_step}: {new.id}.", reverse(
        "admin:operations_operation_change", args=[new.pk]
    )


def _step(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"from_step must be a step's position, not {value!r}") from None
