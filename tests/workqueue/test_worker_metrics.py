"""``runworker --metrics-port``: a real worker process serves its own counters over HTTP.

One worker runs a mix — items that succeed, fail after their retries, stall, lose their lease
to an operator's "requeue now" or are cancelled, and operations that succeed and fail — then the test
scrapes its ``/metrics`` and checks each count against what the database says happened.
"""

from __future__ import annotations

import socket
import urllib.request

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

import operations
from tests.conftest import wait_until
from tests.testapp.models import Sample
from tests.workqueue.conftest import row
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple, float]:
    """{(sample name, sorted label pairs): value} of the worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def runs(samples: dict, queue: str) -> dict[str, float]:
    """{outcome: runs} of one queue."""
    return {
        dict(labels)["outcome"]: v
        for (name, labels), v in samples.items()
        if name == "workqueue_worker_runs_total" and dict(labels)["queue"] == queue and v
    }


def attempts_charged() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(attempts), 0) FROM work_items")
        return cur.fetchone()[0]


EXPECTED_RUNS = {
    "test.noop": {"succeeded": 3},
    "test.fail": {"retried": 2, "failed": 1},
    "test.stall": {"cancelled": 1, "succeeded": 1},  # stalled, then reclaimed and finished
    # One lost its lease (its second claim is still running), one was cancelled by its caller.
    "test.short": {"cancelled": 2},
}


def mixed_run_done() -> bool:
    return (
        WorkItem.objects.filter(queue="test.noop").succeeded().count() == 3
        and WorkItem.objects.filter(queue="test.fail").failed().count() == 1
        and WorkItem.objects.filter(queue="test.stall").succeeded().count() == 1
        and Sample.objects.filter(name="cancelled:lost").exists()
        and Sample.objects.filter(name="cancelled:called-off").exists()
        and row("lost").attempts == 2
        and operations.get(OPS["ok"]).state == "succeeded"
        and operations.get(OPS["bad"]).state == "failed"
    )


OPS: dict[str, str] = {}


def test_a_worker_serves_its_runs_claims_stalls_lost_leases_and_operations_over_http(start_ready_worker):
    port = free_port()
    queues = ["test.noop", "test.fail", "test.stall", "test.short", "operations"]
    proc = start_ready_worker(
        "metrics",
        *[arg for q in queues for arg in ("--queue", q)],
        "--concurrency",
        "8",
        "--poll",
        "0.2",
        "--metrics-port",
        str(port),
    )
    assert f"worker metrics on http://0.0.0.0:{port}/metrics" in proc.output()
    WorkItem.objects.enqueue_many([("test.noop", f"n{i}") for i in range(3)])
    WorkItem.objects.enqueue("test.fail", "f")
    # No progress on its first attempt (stall budget 1 s, lease 3 s); progress once reclaimed.
    WorkItem.objects.enqueue("test.stall", "stalled", metadata={"progress": "reclaimed", "seconds": "1.5"})
    WorkItem.objects.enqueue("test.short", "lost", metadata={"seconds": "600"})
    WorkItem.objects.enqueue("test.short", "called-off", metadata={"seconds": "600"})
    OPS["ok"] = operations.start("test.ops.count", {"steps": 2, "per_step": 1}).id
    OPS["bad"] = operations.start("test.ops.fail", {}).id

    started = Sample.objects.filter(name__in=["started:lost", "started:called-off"])
    wait_until(lambda: started.count() == 2, timeout=30, message="the two test.short runs")
    # An operator requeues one mid-run: the worker's next renewal finds the proof changed.
    assert len(WorkItem.objects.requeue_now([row("lost").id])) == 1
    # The other is cancelled by its caller: its run stops too, but that is no lost lease.
    assert len(WorkItem.objects.cancel_key("called-off")) == 1
    wait_until(mixed_run_done, timeout=60, message="the mixed run")

    def counted() -> dict | None:
        samples = scrape(port)
        settled_fails = value(samples, "workqueue_worker_settle_seconds_count", statement="fail")
        if all(runs(samples, q) == want for q, want in EXPECTED_RUNS.items()) and settled_fails == 3:
            return samples
        return None

    samples = wait_until(counted, timeout=20, message="the worker's counts")
    assert proc.alive(), proc.output()[-3000:]

    assert value(samples, "workqueue_worker_leases_lost_total", queue="test.short") == 1
    assert value(samples, "workqueue_worker_stalls_total", queue="test.stall") == 1
    lost = {k: v for k, v in samples.items() if k[0] == "workqueue_worker_leases_lost_total" and v}
    stalls = {k: v for k, v in samples.items() if k[0] == "workqueue_worker_stalls_total" and v}
    assert len(lost) == 1 and len(stalls) == 1, (lost, stalls)
    # Every claimed item was charged an attempt at its claim: the batch histogram's sum.
    assert value(samples, "workqueue_worker_claim_batch_size_sum") == attempts_charged()
    claims = value(samples, "workqueue_worker_claims_total")
    assert claims >= value(samples, "workqueue_worker_claim_batch_size_count") >= 1
    # Each claim is timed before it is counted, and the idle loop goes on claiming while the
    # scrape reads one figure after the other: at most a claim or two apart.
    assert claims <= value(samples, "workqueue_worker_claim_seconds_count") <= claims + 2
    assert value(samples, "workqueue_worker_settle_seconds_count", statement="complete_many") >= 1
    for queue, outcomes in EXPECTED_RUNS.items():
        assert value(samples, "workqueue_worker_run_duration_seconds_count", queue=queue) == sum(outcomes.values())
    # The stalled run took its budget (1 s, less the microseconds between the stall clock's start
    # and the run's) before it was stopped; its second ran 1.5 s.
    assert value(samples, "workqueue_worker_run_duration_seconds_sum", queue="test.stall") >= 2.4
    ops = {
        (dict(labels)["kind"], dict(labels)["outcome"]): v
        for (name, labels), v in samples.items()
        if name == "operations_worker_runs_total" and v
    }
    assert ops == {
        ("test.ops.count", "succeeded"): 1,
        ("test.ops.fail", "retried"): 2,
        ("test.ops.fail", "failed"): 1,
    }


def test_a_metrics_port_already_in_use_stops_runworker_with_how_to_fix_it(run_command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_command(
            "runworker", "--queue", "test.noop", "--max-seconds", "5", "--metrics-port", str(port),
            "--metrics-address", "127.0.0.1",
        )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot serve worker metrics on 127.0.0.1:{port}" in done.stderr
    assert "give each runworker on a host its own --metrics-port" in done.stderr


@pytest.mark.parametrize("bad", ["0", "65536", "http"])
def test_a_bad_metrics_port_is_refused_by_the_option(run_command, bad):
    done = run_command("runworker", "--queue", "test.noop", "--metrics-port", bad)
    assert done.returncode == 2
    assert f"argument --metrics-port: must be a TCP port from 1 to 65535 (e.g. 9100), not '{bad}'" in done.stderr


def otel_points(reader, name: str) -> dict[tuple, float]:
    """Cumulative points of OpenTelemetry metric ``name``: {sorted attributes: value or count}."""
    found: dict[tuple, float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for p in metric.data.data_points:
                        found[tuple(sorted(p.attributes.items()))] = getattr(p, "sum", None) or getattr(p, "value", 0)
    return found


def run_in_process(queues: list[str], items: int, worker_id: str) -> None:
    from workqueue.worker import Worker, WorkerOptions

    Worker(
        WorkerOptions(queues=queues, max_items=items, batch=10, poll=0.1, worker_id=worker_id, install_signals=False)
    ).run()


def test_a_worker_that_serves_no_metrics_tallies_no_runs(monkeypatch):
    """The per-run tally is the one instrument with a cost per item: off without --metrics-port."""
    from workqueue.worker import metrics as worker_metrics

    monkeypatch.setattr(worker_metrics, "record_runs", False)
    before = worker_metrics.registry.get_sample_value(
        "workqueue_worker_runs_total", {"queue": "test.noop", "outcome": "succeeded"}
    )
    WorkItem.objects.enqueue_many([("test.noop", f"quiet{i}") for i in range(3)])
    run_in_process(["test.noop"], 3, "quiet")
    assert WorkItem.objects.filter(key__startswith="quiet", state="stopped").count() == 3
    after = worker_metrics.registry.get_sample_value(
        "workqueue_worker_runs_total", {"queue": "test.noop", "outcome": "succeeded"}
    )
    assert after == before


def test_with_opentelemetry_the_same_instruments_record_there_and_on_the_registry(otel, monkeypatch):
    from workqueue.worker import metrics as worker_metrics

    _, reader = otel
    monkeypatch.setattr(worker_metrics, "record_runs", True)  # as serve() sets it

    def registry(name: str, **labels) -> float:
        return worker_metrics.registry.get_sample_value(name, labels) or 0.0

    before = {
        "batch": otel_points(reader, "workqueue.claim.batch_size").get((), 0),
        "claims": otel_points(reader, "workqueue.claims").get((), 0),
        "prom_runs": registry("workqueue_worker_runs_total", queue="test.noop", outcome="succeeded"),
        "prom_batch": registry("workqueue_worker_claim_batch_size_sum"),
        "prom_async": registry("workqueue_worker_runs_total", queue="test.async.short", outcome="succeeded"),
    }
    WorkItem.objects.enqueue_many([("test.noop", f"o{i}") for i in range(3)])
    WorkItem.objects.enqueue("test.async.short", "on-the-loop", metadata={"seconds": "0.1"})
    run_in_process(["test.noop", "test.async.short"], 4, "otel")

    assert otel_points(reader, "workqueue.claim.batch_size").get((), 0) - before["batch"] == 4
    assert otel_points(reader, "workqueue.claims").get((), 0) - before["claims"] >= 1
    settles = otel_points(reader, "workqueue.settle.duration")
    assert (("workqueue.statement", "complete_many"),) in settles
    assert registry("workqueue_worker_runs_total", queue="test.noop", outcome="succeeded") - before["prom_runs"] == 3
    # The event loop's run is counted too (its thread's own tally).
    async_runs = registry("workqueue_worker_runs_total", queue="test.async.short", outcome="succeeded")
    assert async_runs - before["prom_async"] == 1
    assert registry("workqueue_worker_claim_batch_size_sum") - before["prom_batch"] == 4
