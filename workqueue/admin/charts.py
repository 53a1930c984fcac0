"""The dashboard's charts: per queue (or all of them), what settled and how long it waited and
ran, per minute over the last hour or per hour over the last week, from the rollup
(workqueue.stats). Drawn as inline SVG on the server: no script, nothing to load."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from workqueue import stats

RANGES = {
    # name: (label, slot seconds, slots, reader)
    "hour": ("last hour, per minute", 60, 60, stats.minutes),
    "week": ("last week, per hour", 3600, 168, stats.hours),
}
HEIGHT = 90
QUANTILES = ((0.5, "p50"), (0.95, "p95"))


@dataclass(frozen=True)
class Chart:
    title: str
    counts: SafeString
    waits: SafeString
    runs: SafeString
    succeeded: int
    failed: int
    #: "p50" and "p95" of the whole range, written ("120 ms", "—").
    wait_p: dict[str, str]
    run_p: dict[str, str]


def _slots(now: dt.datetime, seconds: int, n: int) -> list[dt.datetime]:
    """The n periods ending with the one holding ``now``, oldest first."""
    start = dt.datetime.fromtimestamp(now.timestamp() // seconds * seconds, tz=dt.UTC)
    return [start - dt.timedelta(seconds=seconds * (n - 1 - i)) for i in range(n)]


def _label(period: dt.datetime, seconds: int) -> str:
    return period.strftime("%Y-%m-%d %H:%M UTC" if seconds >= 3600 else "%H:%M UTC")


def _bars(slots, points: dict, seconds: int, width: int) -> SafeString:
    """Succeeded (below) and failed (on top) per period, scaled to the busiest."""
    peak = max((p.succeeded + p.failed for p in points.values()), default=0)
    rows = []
    for i, period in enumerate(slots):
        p = points.get(period)
        ok, bad = (p.succeeded, p.failed) if p else (0, 0)
        total_h = round((ok + bad) / peak * HEIGHT) if peak else 0
        fail_h = min(max(round(bad / peak * HEIGHT), 1), total_h) if bad else 0
        ok_h = total_h - fail_h
        label = f"{_label(period, seconds)}: {ok:,} succeeded, {bad:,} failed"
        x = i * width
        rows.append((label, x, HEIGHT - ok_h, width - 1, ok_h, x, HEIGHT - total_h, width - 1, fail_h))
    body = format_html_join(
        "",
        '<g><title>{}</title><rect class="wq-ok" x="{}" y="{}" width="{}" height="{}"/>'
        '<rect class="wq-fail" x="{}" y="{}" width="{}" height="{}"/></g>',
        rows,
    )
    return format_html(
        '<svg class="wq-chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{a}">{b}</svg>',
        w=len(slots) * width,
        h=HEIGHT,
        a="succeeded and failed per period",
        b=body,
    )


def _lines(slots, points: dict, seconds: int, width: int, which: str) -> SafeString:
    """p50 and p95 of ``which`` ("wait" or "run") per period, on a log scale from 1 ms."""
    series = {
        name: [stats.percentile(getattr(points[period], which), q) if period in points else None for period in slots]
        for q, name in QUANTILES
    }
    top = max((v for vs in series.values() for v in vs if v is not None), default=None)
    if top is None:
        return format_html('<p class="wq-muted">{}</p>', "nothing settled in this range")
    low, high = math.log10(0.001), math.log10(max(top, 0.002))

    def y(v: float) -> float:
        return round(HEIGHT - (math.log10(max(v, 0.001)) - low) / (high - low) * (HEIGHT - 4) - 2, 1)

    dots = []
    for name, values in series.items():
        for i, (period, v) in enumerate(zip(slots, values, strict=True)):
            if v is not None:
                label = f"{_label(period, seconds)}: {which} {name} ≤ {seconds_text(v)}"
                dots.append((label, f"wq-{name}", i * width + width / 2, y(v)))
    body = format_html_join("", '<g><title>{}</title><circle class="{}" cx="{}" cy="{}" r="2"/></g>', dots)
    return format_html(
        '<svg class="wq-chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{a}">'
        '<text class="wq-axis" x="2" y="10">{top}</text><text class="wq-axis" x="2" y="{h}">1 ms</text>{b}</svg>',
        w=len(slots) * width,
        h=HEIGHT,
        a=f"{which} time p50 and p95 per period",
        top=seconds_text(top),
        b=body,
    )


def seconds_text(v: float | None) -> str:
    """A duration as the charts write it (ms under a second)."""
    if v is None:
        return "—"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 120:
        return f"{v:.1f} s"
    return f"{v / 60:.0f} min"


def chart(*, queue: str | None, range_name: str, now: dt.datetime, using: str) -> Chart:
    """The chart of ``queue`` (None: all queues) over the named range as of ``now``."""
    label, seconds, n, reader = RANGES[range_name]
    series = reader(now=now, window=seconds * n, using=using)
    points_list = series.get(queue, []) if queue else stats.combined(series)
    points = {p.period: p for p in points_list}
    slots = _slots(now, seconds, n)
    width = max(3, 480 // n)
    total = stats.Point(slots[0])
    for p in points_list:
        total = total + p
    return Chart(
        title=f"{queue or 'All queues'}: {label}",
        counts=_bars(slots, points, seconds, width),
        waits=_lines(slots, points, seconds, width, "wait"),
        runs=_lines(slots, points, seconds, width, "run"),
        succeeded=total.succeeded,
        failed=total.failed,
        wait_p={name: seconds_text(stats.percentile(total.wait, q)) for q, name in QUANTILES},
        run_p={name: seconds_text(stats.percentile(total.run, q)) for q, name in QUANTILES},
    )
