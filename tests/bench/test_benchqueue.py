"""The benchmark command runs in quick mode, so it cannot rot (its figures are not asserted)."""

import json

import pytest

SECTIONS = (
    "enqueue, one item per statement",
    "enqueue_many",
    "drain, 1 runworker process",
    "drain, 2 runworker processes",
    "drain, 1 plain runworker (every queue, no-op)",
    "drain, 2 plain runworkers (every queue, no-op)",
    "latency enqueue → handler start, p50",
    "latency enqueue → handler start, p99",
    "latency committed → handler start, p50",
    "operations: start → run no-op → succeeded",
    "batch: 100 no-op children → parent done",
    "@task: enqueue → run → SUCCESSFUL",
    "wire: poll → ack → heartbeat → stop",
    "schedules: 50 due at once, 2 workers, fire all",
    "schedules: slots fired",
    "worker RSS after draining",
    "I/O-bound: 100 items awaiting 50 ms, async def",
    "I/O-bound: 100 items sleeping 50 ms, threads",
    "tracing: drain, 1 process (no-op), OpenTelemetry absent (import blocked)",
    "tracing: drain, 1 process (no-op), OpenTelemetry installed, no exporter",
    "tracing: drain, 1 process (no-op), OpenTelemetry SDK + exporter",
    "indexes: raw drain, 2 connections, work_items as shipped",
    "indexes: raw drain, 2 connections, without public_id, unsettled-key, stopped",
)


@pytest.mark.django_db(transaction=True)
def test_benchqueue_quick_prints_every_figure_beside_its_ceiling(run_command, tmp_path):
    out = tmp_path / "bench.json"
    done = run_command("benchqueue", "--quick", "--json", str(out), timeout=480)
    assert done.returncode == 0, done.stderr[-4000:]
    for name in SECTIONS:
        assert name in done.stdout, f"{name!r} missing from:\n{done.stdout}"
    results = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    assert len(results) == len(json.loads(out.read_text())["results"])
    drains = [r for name, r in results.items() if name.startswith("drain")]
    assert drains and all(r["value"] > 0 and r["raw_sql"] > 0 and r["ratio"] > 0 for r in drains)
    assert all(r["value"] > 0 for r in results.values())
    # CPU per item beside every drain and life figure: the workers' and (the test server is
    # local) their backends'; and the ceiling's beside the drains and operations.
    # (The flow-control drains under a runtime override are figures of their own, without CPU.)
    lives = [
        r
        for name, r in results.items()
        if name.startswith(("operations", "@task")) or (name.startswith("drain") and name.endswith("(no-op)"))
    ]
    assert len(lives) == 4
    for r in lives:
        assert r["cpu_client_us_per_item"] > 0, r
        assert r["cpu_postgres_us_per_item"] > 0, r
    for r in lives[:3]:
        assert r["raw_sql_cpu_client_us_per_item"] > 0, r
        assert r["raw_sql_cpu_postgres_us_per_item"] > 0, r
    # The worker a site runs, beside the single-queue drain: its ratio is to that drain.
    for count, plural in ((1, " process"), (2, " processes")):
        site = results[f"drain, {count} plain runworker{'s' if count > 1 else ''} (every queue, no-op)"]
        single = results[f"drain, {count} runworker{plural} (no-op)"]
        assert site["raw_sql"] == single["value"] and site["cpu_client_us_per_item"] > 0, site
    assert "CPU µs/item" in done.stdout


HISTORY_ROWS = (
    "history: drain, 2 processes, small table",
    "history: drain, 2 processes, big table",
    "history: drain big / small",
    "history: enqueue one per commit, small table",
    "history: enqueue one per commit, big table",
    "history: big drain with reap / without",
    "history: admin change list, stopped, big table",
)


@pytest.mark.django_db(transaction=True)
def test_history_section_reports_both_drains_their_ratio_and_the_plans(run_command, tmp_path):
    out = tmp_path / "history.json"
    done = run_command(
        "benchqueue",
        "--quick",
        "--only",
        "history",
        "--history-stopped",
        "600",
        "--history-scheduled",
        "60",
        "--json",
        str(out),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "600 stopped + 60 scheduled loaded" in done.stderr
    report = json.loads(out.read_text())
    results = {r["name"]: r for r in report["results"]}
    for name in HISTORY_ROWS:
        assert any(n.startswith(name) for n in results), f"{name!r} missing from:\n{done.stdout}"
    small = results["history: drain, 2 processes, small table"]
    big = results["history: drain, 2 processes, big table"]
    assert small["value"] > 0 and small["raw_sql"] > 0 and big["value"] > 0 and big["raw_sql"] > 0
    ratio = next(r for n, r in results.items() if n.startswith("history: drain big / small"))
    assert ratio["value"] == pytest.approx(big["value"] / small["value"])
    history = report["meta"]["history"]
    assert (history["stopped"], history["scheduled"]) == (600, 60)
    assert history["reap"] and all(r["sweeps"] >= 1 for r in history["reap"])
    for statement in ("claim", "settle"):
        plan = history["plans"][statement]
        for variant in ("prepared", "custom"):
            assert "work_items" in plan[variant] and "Buffers: shared" in plan[variant], plan[variant]
            assert "actual" in plan[variant]  # ANALYZE: the statement ran
        assert plan["generic_plans"] + plan["custom_plans"] >= 6
    assert "Update on work_items" in history["plans"]["settle"]["custom"]


def test_history_row_counts_must_not_be_negative(run_command):
    done = run_command("benchqueue", "--only", "history", "--history-stopped", "-1")
    assert done.returncode == 2
    assert "--history-stopped takes a count of rows" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_admin_section_times_every_admin_page_on_the_loaded_rows(run_command, tmp_path):
    out = tmp_path / "admin.json"
    done = run_command(
        "benchqueue",
        "--quick",
        "--only",
        "admin",
        "--admin-rows",
        "3000",
        "--admin-operations",
        "300",
        "--json",
        str(out),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "3,000 work items + 300 operations loaded" in done.stderr
    report = json.loads(out.read_text())
    results = {r["name"]: r for r in report["results"]}
    # Every page the section names answered 200 (it raises otherwise) and has its figure.
    for label in ("dashboard", "work items, search account=420", "operations, search error:timed out"):
        assert results[f"admin: {label}"]["value"] > 0
    assert len([n for n in results if n.startswith("admin: ")]) >= 20
    assert report["meta"]["admin"]["rows"] == 3000


def test_admin_row_counts_must_not_be_negative(run_command):
    done = run_command("benchqueue", "--only", "admin", "--admin-rows", "-1")
    assert done.returncode == 2
    assert "--admin-rows takes a count of rows" in done.stderr
