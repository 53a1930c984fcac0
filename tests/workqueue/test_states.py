"""workqueue/states.py is the one place a state set is typed; the SQL renders it, and every
lapsed-lease decision (claim, poll, recover, operations) writes the same last_error."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db.models.functions import Now

from operations import store as ops_store
from tests.conftest import ROOT
from tests.workqueue.conftest import row
from workqueue import sql, states
from workqueue.models import HELD_STATES, LIVE_STATES, UNSETTLED_STATES, WorkItem
from workqueue.sql import generated
from workqueue.testing import EnvironmentFactory

SQL_FILES = sorted([*ROOT.glob("workqueue/sql/*.sql"), *ROOT.glob("operations/sql/*.sql")])
STATE_NAMES = {s.value for s in states.State}
WORK_ITEM_NAMES = STATE_NAMES | {o.value for o in states.Outcome}
# An IN (or = ANY / <> ALL ARRAY[...]) list of two or more string literals.
LITERAL_LIST = re.compile(r"(?:\bIN\s*\(|\bARRAY\s*\[)\s*('[^']*'(?:\s*,\s*'[^']*')+)\s*[)\]]", re.I)
RENDERED = {"workqueue": sql.QUERIES, "operations": ops_store.QUERIES}
LAPSED_ERROR = (
    "lease lapsed on attempt {n} of {n} (the holder died or stalled); attempts are spent, so it is not retried"
)


def sql_text(path) -> str:
    """The file without its comment lines (comments may name states freely)."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))


def hand_typed_lists(text: str, *, outcomes: bool) -> list[str]:
    """The literal lists in text that type work-item states (or, when outcomes, outcomes too:
    in workqueue's files they can only be work items') by hand. Operations' own states
    (pending, running, succeeded, ...) are not work items'."""
    names = WORK_ITEM_NAMES if outcomes else STATE_NAMES
    found = []
    for match in LITERAL_LIST.finditer(text):
        values = set(re.findall(r"'([^']*)'", match.group(1)))
        if values & names:
            found.append(match.group(0))
    return found


def test_the_detector_sees_a_hand_typed_state_list():
    assert hand_typed_lists("WHERE w.state IN ('starting', 'active')", outcomes=False)
    assert hand_typed_lists("w.outcome = ANY (ARRAY['failed','cancelled'])", outcomes=True)
    assert not hand_typed_lists("o.state IN ('pending', 'running')", outcomes=False)
    assert not hand_typed_lists("o.state IN ('succeeded', 'failed', 'cancelled')", outcomes=False)
    assert not hand_typed_lists("name = ANY (ARRAY['recover', 'reap'])", outcomes=True)
    assert not hand_typed_lists("w.state = 'queued'", outcomes=True)


def test_no_sql_file_hand_types_a_state_set():
    assert len(SQL_FILES) >= 5
    typed = {}
    for path in SQL_FILES:
        rel = str(path.relative_to(ROOT))
        found = hand_typed_lists(sql_text(path), outcomes=rel.startswith("workqueue/"))
        if found:
            typed[rel] = found
    assert not typed, f"render these from workqueue/states.py ({{states_NAME}}): {typed}"


def test_every_state_set_renders_exactly_what_states_py_says():
    fragments = generated.fragments()
    for name, members in states.STATE_SETS.items():
        rendered = sql.QUERIES.fragments[f"states_{name}"].text
        assert rendered == fragments[f"states_{name}"] == "(" + ", ".join(f"'{m.value}'" for m in members) + ")"
        assert re.findall(r"'(\w+)'", rendered) == [m.value for m in members]
    for name, members in states.OUTCOME_SETS.items():
        assert re.findall(r"'(\w+)'", fragments[f"outcomes_{name}"]) == [m.value for m in members]
    assert {n for n in fragments if n.startswith(("states_", "outcomes_"))} == {
        *(f"states_{n}" for n in states.STATE_SETS),
        *(f"outcomes_{n}" for n in states.OUTCOME_SETS),
    }
    assert states.render_states("live") == "('queued', 'starting', 'active')"
    with pytest.raises(KeyError, match="unknown state set 'alive'; known: live, held"):
        states.render_states("alive")


def test_every_set_a_statement_names_exists_and_python_uses_the_same_sets():
    named = set()
    for path in [*SQL_FILES, ROOT / "workqueue/sql/fragments.sql"]:
        named |= set(re.findall(r"\{states_(\w+)\}", sql_text(path)))
    assert {"live", "held", "running", "unsettled"} <= named <= set(states.STATE_SETS)
    # The model's sets are states.py's, not copies.
    assert (LIVE_STATES, HELD_STATES, UNSETTLED_STATES) == (
        states.LIVE_STATES,
        states.HELD_STATES,
        states.UNSETTLED_STATES,
    )
    assert [c[0] for c in WorkItem._meta.get_field("state").choices] == [s.value for s in states.ALL_STATES]
    live = {c.name: c for c in WorkItem._meta.constraints}["work_items_live_key_uniq"]
    assert live.condition.children == [("state__in", [s.value for s in states.LIVE_STATES])]
    assert set(WorkItem.objects.live().query.where.children[0].rhs) == set(states.LIVE_STATES)


def test_every_rendered_statement_has_no_placeholder_left():
    for app, statements in RENDERED.items():
        for name in statements.names():
            text = statements[name]
            assert not re.search(r"\{\w+[:}]", text), f"{app}: {name} has an unrendered placeholder"
            assert not re.search(r"\$[a-z_]", text), f"{app}: {name} has an unfilled fragment argument"


def test_operations_sql_never_names_work_items_and_shares_the_item_fragments():
    for path in ROOT.glob("operations/sql/*.sql"):
        lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if "work_items" in line]
        assert not lines, f"{path.name} names work_items on lines {lines}: use a workqueue/sql/fragments.sql fragment"
    enqueue = (ROOT / "workqueue/sql/queries.sql").read_text().split("-- name: item_enqueue\n")[1].split("-- name:")[0]
    assert "{item_insert:" in enqueue
    op_start = (ROOT / "operations/sql/queries.sql").read_text().split("-- name: op_start\n")[1].split("-- name:")[0]
    assert "{item_insert:" in op_start
    # Rendered, both insert through the same text (indented to its place).
    insert_head = " ".join(sql.QUERIES["item_enqueue"].split("FROM (", 1)[0].split())
    assert insert_head.startswith("INSERT INTO work_items AS w")
    assert insert_head in " ".join(ops_store.QUERIES["op_start"].split())


def test_every_lapsed_lease_decision_writes_one_message():
    message = LAPSED_ERROR.format(n="%%s")
    deciders = {
        "item_claim": sql.QUERIES,
        "item_requeue_lapsed": sql.QUERIES,
        "wire_poll": sql.QUERIES,
        "op_settle_unbegun": ops_store.QUERIES,
    }
    for name, statements in deciders.items():
        assert re.search(r"format\(\s*'" + re.escape(message) + "'", statements[name]), name
    everything = "\n".join(s[n] for s in RENDERED.values() for n in s.names())
    assert set(re.findall(r"format\(\s*'([^']*lapsed[^']*)'", everything)) == {message}


@pytest.mark.django_db(transaction=True)
def test_claim_poll_and_recover_fail_a_spent_lapsed_item_with_the_same_last_error():
    env = EnvironmentFactory(name="hosted")
    lapsed = {
        "state": "active",
        "lease_token": "00000000-0000-0000-0000-000000000001",
        "lease_expires_at": Now() - dt.timedelta(seconds=1),
        "started_at": Now(),
        "attempts": 2,
        "max_attempts": 2,
    }
    WorkItem.objects.enqueue("test.noop", "by-claim")
    WorkItem.objects.enqueue("test.wire", "by-poll", environment=env)
    WorkItem.objects.enqueue("test.wire", "by-recover", environment=env)
    WorkItem.objects.filter(key__in=["by-claim", "by-poll"]).update(**lapsed)

    claimed = WorkItem.objects.claim(["test.noop"], limit=5, worker_id="w")
    assert ([i.key for i in claimed.settled], claimed.items) == (["by-claim"], [])
    polled = WorkItem.objects.poll(env.id)
    assert [i.key for i in polled.exhausted] == ["by-poll"] and polled.item.key == "by-recover"
    # Now the polled one, acked and heartbeating, dies holding its last attempt: recover fails it.
    WorkItem.objects.filter(key="by-recover").update(**lapsed)
    sql.run("item_requeue_lapsed", {"now": None, "limit": 10})

    for key in ("by-claim", "by-poll", "by-recover"):
        item = row(key)
        assert (item.state, item.outcome, item.reclaimed, item.lease_token) == ("stopped", "failed", True, None), key
        assert item.last_error == LAPSED_ERROR.format(n=2), key
