"""bench/cpu.py reads real CPU time: of a process that burns some, and of a backend that does."""

import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from bench import cpu
from bench.harness import conninfo

# Burns 0.3 s of CPU once told to (a line on stdin), then says so: the window covers all of
# it however loaded the machine is.
BURN = """
import sys, time
sys.stdin.readline()
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print("done", flush=True)
time.sleep(30)
"""


def test_a_process_that_burns_cpu_is_measured_and_an_idle_one_is_not():
    burner = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert cpu.wait_quiet([burner.pid, sleeper.pid])  # the interpreters' start-up is over
        busy = cpu.Meter([burner.pid], lambda: []).start()
        idle = cpu.Meter([sleeper.pid], lambda: []).start()
        burner.stdin.write("go\n")
        burner.stdin.flush()
        assert burner.stdout.readline().strip() == "done"
        burnt, slept = busy.stop(), idle.stop()
    finally:
        burner.kill()
        sleeper.kill()
        burner.wait()
        sleeper.wait()
        burner.stdin.close()
        burner.stdout.close()
    assert burnt.client_s >= 0.25  # 0.3 s, read at the kernel's clock-tick resolution
    assert slept.client_s <= 0.02
    assert burnt.server_s is None  # no backend found: nothing to read ("n/a"), not zero
    assert burnt.per_item_us(1000)[0] == pytest.approx(burnt.client_s * 1000)


def test_a_process_that_is_gone_reads_as_none():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert cpu.process_seconds(done.pid) is None


@pytest.mark.django_db(transaction=True)
def test_the_backends_of_an_application_name_are_found_and_their_cpu_read():
    name = cpu.app_name("test-cpu")
    info = conninfo(connection.settings_dict, connection.settings_dict["NAME"])
    with psycopg.connect(info, autocommit=True, application_name=name) as busy:
        pids = cpu.backends_by_app_name(connection.cursor, name)
        assert pids() == [busy.info.backend_pid]
        local = cpu.is_postgres(busy.info.backend_pid)
        meter = cpu.Meter([], pids).start()
        busy.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        spent = meter.stop()
    assert spent.client_s == 0.0
    if not local:
        assert spent.server_s is None  # "n/a": a server elsewhere cannot be read from here
        assert cpu.fmt_us(spent.server_s) == "n/a"
        return
    assert spent.server_s >= 0.05
