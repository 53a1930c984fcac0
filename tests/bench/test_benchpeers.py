"""`manage.py benchpeers` (behind `make bench-peers`): our side runs without the peers' venv, and
bad input is refused before anything runs. The peers themselves are not installed by the suite:
that needs their pinned packages in .venv-peers (`make bench-peers` does it)."""

import json

import pytest


@pytest.mark.django_db(transaction=True)
def test_benchpeers_measures_our_drain_with_rate_and_cpu_per_item(run_command, tmp_path):
    out = tmp_path / "peers.json"
    # Enough items that the backends' CPU spans several of the kernel's 10 ms ticks: a drain of
    # a few hundred can read 0 ticks for them.
    done = run_command(
        "benchpeers", "--systems", "workqueue", "--items", "4000", "--workers", "1", "--json", str(out), timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "workqueue" in done.stdout and "CPU µs/item" in done.stdout
    (row,) = json.loads(out.read_text())["results"]
    assert row["system"] == "workqueue" and row["processes"] == 1 and row["items_done"] == 4000
    assert row["items_per_s"] > 0 and row["cpu_worker_us_per_item"] > 0 and row["cpu_postgres_us_per_item"] > 0


@pytest.mark.parametrize(
    "args, says",
    [
        (["--systems", "workqueue,celery"], "unknown system(s) celery"),
        (["--workers", "one"], "--workers takes numbers"),
        (["--pgqueuer-batches", "0"], "--pgqueuer-batches takes positive numbers"),
    ],
)
def test_benchpeers_refuses_bad_input_with_a_clear_error(run_command, args, says):
    done = run_command("benchpeers", *args)
    assert done.returncode == 2
    assert says in done.stderr
