"""Template helpers for the work queue admin: humanized durations, leases, numbers, small charts.

The relative times are always computed against an instant read from the database (the
dashboard's clock, or ``db_now`` annotated on the change list's rows), never Python's clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from urllib.parse import urlencode

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()

#: The one empty marker of every admin page of both apps.
DASH = "—"
#: The one timestamp format: seconds and zone, in the site's time zone.
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S %Z"


def timestamp(value: dt.datetime | None) -> str:
    """An instant as every admin page writes it: '2026-12-03 17:36:08 UTC' (the site's zone)."""
    if value is None:
        return DASH
    from django.utils import timezone

    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return value.strftime(TIMESTAMP_FORMAT).strip()


def relative(value: dt.datetime | None, now: dt.datetime | None = None) -> SafeString:
    """'3 min ago' or 'in 5 min', with the exact instant on hover (a title attribute).

    ``now`` is the database's clock where the row carries one (``db_now``); else Python's."""
    if value is None:
        return format_html("{}", DASH)
    if now is None:
        from django.utils import timezone

        now = timezone.now()
    seconds = (now - value).total_seconds()
    text = (
        "just now" if abs(seconds) < 1 else (f"{duration(seconds)} ago" if seconds > 0 else f"in {duration(seconds)}")
    )
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), timestamp(value), text)


def queue_chip(queue: str, changelist_url: str) -> SafeString:
    """A queue's name as a link to the list filtered to it."""
    return format_html(
        '<a class="wq-chip" href="{}?{}" title="Only {}">{}</a>',
        changelist_url,
        urlencode({"queue": queue}),
        queue,
        queue,
    )


def badge(label: str, tone: str, title: str = "") -> str:
    """A coloured label (the admin's state, outcome and schedule badges)."""
    return format_html('<span class="wq-badge wq-tone-{}" title="{}">{}</span>', tone, title, label)


def duration(seconds: float | None) -> str:
    """Say a length of time briefly: '42 s', '3 min', '2 h 5 min', '4 d 3 h'."""
    if seconds is None:
        return DASH
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def seconds_between(later: dt.datetime | None, earlier: dt.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def lease_text(expires_at: dt.datetime | None, now: dt.datetime | None) -> str:
    """'in 42 s' while a lease runs, 'lapsed 3 min ago' once it has run out, '—' without one."""
    left = seconds_between(expires_at, now)
    if left is None:
        return DASH
    return f"in {duration(left)}" if left >= 0 else f"lapsed {duration(left)} ago"


def ago(seconds: float | None, never: str = "never") -> str:
    """'3 min ago' for a number of seconds in the past."""
    return never if seconds is None else f"{duration(seconds)} ago"


def number(value) -> str:
    """A count with thousands separators: 1,234,567."""
    if value is None or value == "":
        return DASH
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


register.filter("wq_duration", duration)
register.filter("wq_time", timestamp)
register.filter("wq_relative", relative)
register.filter("wq_ago", ago)
register.filter("wq_num", number)


BAR_W, BAR_GAP, CHART_H = 6, 1, 24


@register.simple_tag
def wq_sparkbars(buckets: Sequence[tuple[int, int]], bucket_seconds: int = 300) -> SafeString:
    """An inline SVG of (completed, failed) per bucket, oldest left: completed below, failed on top."""
    n = len(buckets)
    peak = max((c + f for c, f in buckets), default=0)
    minutes = bucket_seconds // 60
    bars = []
    for i, (completed, failed) in enumerate(buckets):
        x = i * (BAR_W + BAR_GAP)
        if peak:
            total_h = max(round((completed + failed) / peak * CHART_H), 1 if completed + failed else 0)
            fail_h = max(round(failed / peak * CHART_H), 1 if failed else 0) if failed else 0
        else:
            total_h = fail_h = 0
        ok_h = max(total_h - fail_h, 0)
        newest, oldest = (n - 1 - i) * minutes, (n - i) * minutes
        label = f"{oldest}–{newest} min ago: {completed:,} completed, {failed:,} failed"
        bars.append(
            (
                label,
                x,
                CHART_H - 1,
                BAR_W,
                x,
                CHART_H - ok_h,
                BAR_W,
                ok_h,
                x,
                CHART_H - total_h,
                BAR_W,
                fail_h,
            )
        )
    body = format_html_join(
        "",
        '<g><title>{}</title><rect class="wq-zero" x="{}" y="{}" width="{}" height="1"/>'
        '<rect class="wq-ok" x="{}" y="{}" width="{}" height="{}"/>'
        '<rect class="wq-fail" x="{}" y="{}" width="{}" height="{}"/></g>',
        bars,
    )
    width = n * (BAR_W + BAR_GAP) - BAR_GAP
    completed = sum(c for c, _ in buckets)
    failed = sum(f for _, f in buckets)
    return format_html(
        '<svg class="wq-spark" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="last hour: {} completed, {} failed">{}</svg>',
        width,
        CHART_H,
        width,
        CHART_H,
        f"{completed:,}",
        f"{failed:,}",
        body,
    )


CAP_W = 56


@register.simple_tag
def wq_capbar(used: int, cap: int | None) -> SafeString:
    """A thin SVG gauge of used / cap slots (nothing when the queue has no cap)."""
    if not cap:
        return SafeString("")
    filled = round(min(used / cap, 1.0) * CAP_W)
    cls = "wq-cap-full" if used >= cap else "wq-cap"
    return format_html(
        '<svg class="wq-capbar" width="{}" height="6" viewBox="0 0 {} 6" aria-hidden="true">'
        '<rect class="wq-track" x="0" y="0" width="{}" height="6" rx="2"/>'
        '<rect class="{}" x="0" y="0" width="{}" height="6" rx="2"/></svg>',
        CAP_W,
        CAP_W,
        CAP_W,
        cls,
        filled,
    )


@register.simple_tag
def wq_count(value, base_url: str, alert: bool = False, **params) -> SafeString:
    """A count linking to the change list filtered to those rows (a quiet 0 links nowhere)."""
    text = number(value)
    if not value:
        return format_html('<span class="wq-quiet">{}</span>', text)
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return format_html(
        '<a href="{}?{}"{}>{}</a>', base_url, query, SafeString(' class="wq-alert"') if alert else "", text
    )


@register.simple_tag
def wq_flow_value(flow, field: str) -> SafeString:
    """A flow limit's value on the dashboard, and where it comes from (settings or override)."""
    if flow is None:
        return format_html("{}", DASH)
    shown = flow.shown(field)
    source = flow.source(field)
    if not shown:
        return format_html('<span class="wq-quiet" title="No limit ({})">{}</span>', source, DASH)
    tone = "warn" if source == "override" else "quiet"
    return format_html('{} <span class="wq-note wq-tone-{}">{}</span>', shown, tone, source)


@register.simple_tag
def wq_flow_input(flow, field: str, form: str = "") -> SafeString:
    """The input for one override in its column (the header names it): its current override,
    the setting as placeholder; ``form``: the id of the row's form, which sits in another cell."""
    override = flow.shown(field) if flow is not None and field in flow.overridden else ""
    setting = flow.values[field] if flow is not None and field not in flow.overridden else None
    hint = flow.shown(field) if setting is not None else ("e.g. 50/s" if field.startswith("rate") else "N")
    return format_html(
        '<input type="text" name="{}" value="{}" size="7" placeholder="{}" aria-label="{}"{}>',
        field,
        override,
        hint,
        field.replace("_", " "),
        format_html(' form="{}"', form) if form else "",
    )
