"""The humanizing helpers the admin pages use."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from workqueue.templatetags.workqueue_admin import ago, duration, lease_text, number, wq_capbar, wq_sparkbars

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (42.9, "42 s"),
        (59, "59 s"),
        (60, "1 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (3600 + 5 * 60, "1 h 5 min"),
        (86400, "1 d"),
        (86400 * 3 + 3600 * 4 + 59, "3 d 4 h"),
        (-180, "3 min"),
        (None, "—"),
    ],
)
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_lease_text_says_how_long_is_left_or_since_when_it_lapsed():
    assert lease_text(NOW + dt.timedelta(seconds=42), NOW) == "in 42 s"
    assert lease_text(NOW - dt.timedelta(minutes=3, seconds=20), NOW) == "lapsed 3 min ago"
    assert lease_text(None, NOW) == "—"


def test_ago_and_number():
    assert ago(125) == "2 min ago"
    assert ago(None) == "never"
    assert number(1234567) == "1,234,567"
    assert number(0) == "0"


def test_sparkbars_draw_one_bar_per_bucket_scaled_to_the_busiest():
    svg = wq_sparkbars([(0, 0)] * 10 + [(10, 0), (5, 5)])
    assert svg.count("<g>") == 12
    heights = [int(h) for h in re.findall(r'class="wq-ok" x="\d+" y="\d+" width="\d+" height="(\d+)"', svg)]
    fails = [int(h) for h in re.findall(r'class="wq-fail" x="\d+" y="\d+" width="\d+" height="(\d+)"', svg)]
    assert heights[:10] == [0] * 10 and fails[:10] == [0] * 10
    assert heights[10] == heights[11] + fails[11] > 0 and fails[11] > 0
    assert "10 completed, 0 failed" in svg and 'aria-label="last hour: 15 completed, 5 failed"' in svg


def test_capbar_fills_in_proportion_and_marks_a_full_queue():
    assert 'class="wq-cap" x="0" y="0" width="28"' in wq_capbar(1, 2)
    assert "wq-cap-full" in wq_capbar(3, 3)
    assert wq_capbar(2, None) == ""
