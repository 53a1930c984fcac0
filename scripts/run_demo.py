"""`make run`: migrate, create the demo admin, then run a worker, the web server, a demo feeder
and a self-hosted poller (the official SDK against the demo's wire API).

Runs under scripts/devdb.py, which has already set DATABASE_URL. It supervises its children as
systemd would: one that exits (a database restart the feeder did not ride out, say) is started
again, with a backoff. Ctrl-C stops everything (the worker drains gracefully). ``--fresh``
(`make run-fresh`) empties the demo's tables first, so a backlog a previous run left does not
greet the next one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MANAGE = [PY, str(ROOT / "manage.py")]


def free_port(preferred: int) -> int:
    for port in range(preferred, preferred + 50):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit(f"no free port in {preferred}..{preferred + 49}; set PORT=...")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
    parser.add_argument("--feed-every", type=float, default=5.0)
    parser.add_argument("--fresh", action="store_true", help="Empty every table first (a new admin password follows).")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    prepare(env, fresh=args.fresh)
    setup = json.loads(subprocess.check_output([*MANAGE, "demo_setup", "--json"], cwd=ROOT, env=env))
    port = free_port(args.port)
    base = f"http://127.0.0.1:{port}"

    commands = {
        "worker": [*MANAGE, "runworker", "--concurrency", "8", "--maintenance", "30", "--worker-id", "demo-worker"],
        "web": [*MANAGE, "runserver", f"127.0.0.1:{port}", "--noreload"],
        "feeder": [*MANAGE, "demo_feed", "--every", str(args.feed_every)],
        "poller": [
            *MANAGE,
            "demo_poller",
            "--base-url",
            base,
            "--environment",
            setup["environment_id"],
            "--key",
            setup["environment_key"],
        ],
    }
    quiet = {"feeder", "poller"}  # their lines would drown the worker's and the web server's

    def start(name: str) -> subprocess.Popen:
        return subprocess.Popen(
            commands[name],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL if name in quiet else None,
            start_new_session=True,
        )

    procs = {name: start(name) for name in ("worker", "web")}
    time.sleep(1.5)
    procs.update((name, start(name)) for name in ("feeder", "poller"))
    line = "=" * 72
    # Children run in their own sessions: a terminal's Ctrl-C reaches only this script, which
    # then sends each of them one SIGTERM (a second signal would make the worker exit at once).
    print(
        f"\n{line}\n"
        f"  The demo is up.\n\n"
        f"  Admin:       {base}/admin/   user: {setup['username']}   password: {setup['password']}\n"
        f"               (a new password is printed each time `make run` starts)\n"
        f"  Dashboard:   {base}/admin/workqueue/workitem/dashboard/\n"
        f"  Operations:  {base}/admin/operations/operation/   (click one to watch it live)\n"
        f"  Batches:     {base}/admin/operations/operation/?kind=operations.batch   (and ?kind=operations.chain)\n"
        f"               open one: its children fan out below the live bar; its `then` starts once they all end\n"
        f"  Schedules:   {base}/admin/workqueue/schedule/   (every 10 s, every minute, every 2 minutes)\n"
        f"  API:         {base}/api/operations   (log in to the admin first)\n"
        f"  Wire API:    {base}/v1/environments/{setup['environment_id']}/work/poll\n"
        f"               environment key: {setup['environment_key']}\n\n"
        f"  A worker, the web server, a demo feeder and a self-hosted poller (the SDK) are running;\n"
        f"  Ctrl-C stops them. `make run-fresh` starts again from empty tables.\n"
        f"{line}\n",
        flush=True,
    )

    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    supervise(procs, start, lambda: stopping)
    stop_all(procs)
    print("[make run] stopped", flush=True)
    return 0


def prepare(env: dict, *, fresh: bool) -> None:
    """Migrate, collect static files, empty the tables (``--fresh``), run the sweeps, check."""
    # Checks run once the sweeps below have run (a stale-sweep warning would only be noise here).
    subprocess.check_call([*MANAGE, "migrate", "--noinput", "--skip-checks", "-v", "0"], cwd=ROOT, env=env)
    subprocess.check_call([*MANAGE, "collectstatic", "--noinput", "-v", "0"], cwd=ROOT, env=env)
    if fresh:
        subprocess.check_call([*MANAGE, "flush", "--noinput", "--skip-checks"], cwd=ROOT, env=env)
        print("[make run] emptied the demo's tables (--fresh)", flush=True)
    else:
        left = backlog(env)
        if left:
            print(f"[make run] {left} items are left from a previous run; `make run-fresh` starts empty", flush=True)
    # The sweeps cron would run; the worker below also runs them every 30 s (--maintenance).
    for sweep in ("recover", "reap"):
        subprocess.check_call([*MANAGE, sweep], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    subprocess.check_call([*MANAGE, "check", "--database", "default"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)


def supervise(procs: dict, start, stopping) -> None:
    """Until ``stopping()``: start again, with a growing pause (2 s doubling to 30 s), any child
    that exited."""
    restarts = dict.fromkeys(procs, 0)
    due: dict[str, float] = {}
    while not stopping():
        now = time.monotonic()
        for name, proc in procs.items():
            if name in due:
                if now >= due[name]:
                    del due[name]
                    procs[name] = start(name)
                    print(f"[make run] {name} started again", flush=True)
            elif proc.poll() is not None:
                restarts[name] += 1
                wait = min(2 ** restarts[name], 30)
                print(f"[make run] {name} exited with {proc.returncode}; starting it again in {wait}s", flush=True)
                due[name] = now + wait
        time.sleep(0.5)


def stop_all(procs: dict) -> None:
    """One SIGTERM each, then up to 35 s for all of them to end (killed past it)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 35
    for proc in procs.values():
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()


def backlog(env: dict) -> int:
    """Unsettled items in the demo's database (0 when it cannot tell)."""
    try:
        out = subprocess.check_output(
            [
                *MANAGE,
                "shell",
                "-c",
                "from workqueue.models import WorkItem; print(WorkItem.objects.unsettled().count())",
            ],
            cwd=ROOT,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        return int(out.strip() or 0)
    except (subprocess.CalledProcessError, ValueError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
