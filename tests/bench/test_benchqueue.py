"""The benchmark command runs in quick mode, so it cannot rot (its figures are not asserted)."""

import json

import pytest

SECTIONS = (
    "enqueue, one item per statement",
    "enqueue_many",
    "drain, 1 runworker process",
    "drain, 2 runworker processes",
    "latency enqueue → handler start, p50",
    "latency enqueue → handler start, p99",
    "operations: start → run no-op → succeeded",
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
)


@pytest.mark.django_db(transaction=True)
def test_benchqueue_quick_prints_every_figure_beside_its_ceiling(run_command, tmp_path):
    out = tmp_path / "bench.json"
    done = run_command("benchqueue", "--quick", "--json", str(out), timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    for name in SECTIONS:
        assert name in done.stdout, f"{name!r} missing from:\n{done.stdout}"
    results = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    assert len(results) == len(json.loads(out.read_text())["results"])
    drains = [r for name, r in results.items() if name.startswith("drain")]
    assert drains and all(r["value"] > 0 and r["raw_sql"] > 0 and r["ratio"] > 0 for r in drains)
    assert all(r["value"] > 0 for r in results.values())
