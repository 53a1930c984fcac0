"""Run the worker-process, operations and wire tests through a real PgBouncer in transaction mode.

``make test-pgbouncer`` runs this. It proves what the docs promise a site behind a
transaction pooler (docs/performance.md, "Past one machine"):

1. Find PostgreSQL as ``make test`` does (scripts/devdb.py) and install Debian's
   ``pgbouncer`` when it is missing (``apt-get``, as root; elsewhere it says what to install).
2. Start PgBouncer on a free loopback port, ``pool_mode = transaction``, with a wildcard
   database (``* = host=... port=...``) in front of the server; its config, pid and log live
   in a temporary folder, and it runs as an unprivileged user (it refuses root).
3. Create the test database directly on the server, then run pytest with ``--reuse-db`` and
   every connection — the tests' and their ``runworker`` subprocesses' — through PgBouncer,
   with the settings such a site sets: ``WORKQUEUE["LISTEN_DATABASE_URL"]`` pointing at the
   server, ``WORKQUEUE["PREPARED_STATEMENTS"] = False`` (Debian's PgBouncer is older than
   1.21) and Django's ``DISABLE_SERVER_SIDE_CURSORS`` (see tests/settings.py).
4. Stop PgBouncer and drop the test database, whatever happened.

Tests that need a session on the server by their nature are marked ``direct_db`` and left
out here (``-m "not direct_db"``). Extra arguments go to pytest.

Usage::

    python scripts/pgbouncer_test.py [PYTEST ARGS...]
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import devdb  # noqa: E402

#: What runs through PgBouncer: real runworker processes (claims, caps, crashes, signals), the
#: operations runner and its worker processes, the wire API.
SUITES = [
    "tests/workqueue/test_worker_process.py",
    "tests/workqueue/test_claim_concurrency.py",
    "tests/operations",
    "tests/workqueue/wire",
]
#: Under tests/operations but not part of the pooler run: the admin pages and the django.tasks
#: backend's contract (neither runs worker processes).
IGNORED = ["--ignore=tests/operations/admin", "--ignore=tests/operations/tasks"]
#: Server connections PgBouncer may open (the server is shared; clients beyond this wait).
POOL_SIZE = 20


def say(msg: str) -> None:
    print(f"[pgbouncer] {msg}", file=sys.stderr, flush=True)


def find_pgbouncer() -> str:
    """The pgbouncer binary, installed from Debian's package when missing and we are root."""
    for candidate in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("pgbouncer is not installed: install it (Debian/Ubuntu: apt-get install pgbouncer) and rerun")
    say("installing Debian's pgbouncer package")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.check_call(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
    # The package's own service (if the machine starts it) listens on 6432 with its own
    # config; ours uses a private config on a free port, so it does not matter.
    subprocess.check_call(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "pgbouncer"], env=env, stdout=subprocess.DEVNULL
    )
    return "/usr/sbin/pgbouncer"


def server_params(url: str) -> dict:
    """host, port, user and database of a postgres:// URL (a socket folder as host too)."""
    parts = urlparse(url)
    query = parse_qs(parts.query)
    host = parts.hostname or query.get("host", ["/var/run/postgresql"])[0]
    return {
        "host": unquote(host),
        "port": parts.port or 5432,
        "user": unquote(parts.username or "postgres"),
        "password": unquote(parts.password) if parts.password else "",
        "dbname": parts.path.lstrip("/") or "postgres",
    }


def url_for(params: dict, dbname: str, *, host: str | None = None, port: int | None = None) -> str:
    host = host or params["host"]
    port = port or params["port"]
    password = f":{quote(params['password'])}" if params["password"] else ""
    user = quote(params["user"])
    if host.startswith("/"):
        return f"postgres://{user}{password}@/{dbname}?host={quote(host)}&port={port}"
    return f"postgres://{user}{password}@{host}:{port}/{dbname}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_as() -> str | None:
    """The user PgBouncer runs as: itself when we are not root (it refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise SystemExit("running as root with neither a postgres nor a nobody user for PgBouncer to run as")


def write_config(folder: Path, params: dict, port: int) -> Path:
    target = f"host={params['host']} port={params['port']}"
    if params["password"]:
        target += f" password={params['password']}"
    (folder / "userlist.txt").write_text(f'"{params["user"]}" "{params["password"]}"\n')
    config = folder / "pgbouncer.ini"
    config.write_text(
        f"""\
[databases]
; Every database name goes to the same server: the dev database, the test database and
; "postgres" (where Django asks whether the test database exists).
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "userlist.txt"}
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits
logfile = {folder / "pgbouncer.log"}
pidfile = {folder / "pgbouncer.pid"}
log_connections = 0
log_disconnections = 0
stats_users = {params["user"]}
"""
    )
    return config


def wait_ready(proc: subprocess.Popen, params: dict, port: int, log: Path, timeout: float = 20.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"pgbouncer exited with {proc.returncode}:\n{tail(log)}")
        try:
            with psycopg.connect(url_for(params, "postgres", host="127.0.0.1", port=port), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise SystemExit(f"pgbouncer did not accept a connection on port {port} in {timeout}s:\n{tail(log)}")
            time.sleep(0.2)


def tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def pooled_traffic(params: dict, port: int, dbname: str) -> tuple[int, int]:
    """(transactions, queries) PgBouncer served for ``dbname`` (its admin console's SHOW STATS)."""
    import psycopg

    with psycopg.connect(url_for(params, "pgbouncer", host="127.0.0.1", port=port), autocommit=True) as conn:
        result = conn.pgconn.exec_(b"SHOW STATS")  # the console speaks the simple protocol only
        columns = [result.fname(i).decode() for i in range(result.nfields)]
        for row in range(result.ntuples):
            values = dict(zip(columns, (result.get_value(row, i) for i in range(result.nfields)), strict=True))
            if values["database"] == dbname.encode():
                return int(values["total_xact_count"]), int(values["total_query_count"])
    return 0, 0


def recreate_database(params: dict, name: str, *, create: bool) -> None:
    """Drop ``name`` on the server directly (connections and all), and create it afresh."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url_for(params, "postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # immediate shutdown: the tests are over
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main(argv: list[str]) -> int:
    binary = find_pgbouncer()
    url, embedded = devdb.resolve()
    params = server_params(url)
    test_db = os.environ.get("TEST_DATABASE_NAME") or f"test_{params['dbname']}"
    port = free_port()
    user = run_as()
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    config = write_config(folder, params, port)
    log = folder / "pgbouncer.log"
    if user:
        info = pwd.getpwnam(user)
        for path in (folder, *folder.iterdir()):
            os.chown(path, info.pw_uid, info.pw_gid)
    cmd = [binary, *(["-u", user] if user else []), str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # make's Ctrl-C reaches pytest too; a SIGTERM to us still runs the clean-up below.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        wait_ready(proc, params, port, log)
        say(f"PgBouncer {version(binary)} in transaction mode on 127.0.0.1:{port} -> {params['host']}:{params['port']}")
        recreate_database(params, test_db, create=True)
        env = dict(
            os.environ,
            DATABASE_URL=url_for(params, params["dbname"], host="127.0.0.1", port=port),
            TEST_DATABASE_NAME=test_db,
            LISTEN_DATABASE_URL=url_for(params, test_db),
            TRANSACTION_POOLER="1",
        )
        pytest = [sys.executable, "-m", "pytest", "--reuse-db", "-m", "not direct_db", *SUITES, *IGNORED, *argv]
        say(" ".join(pytest[1:]))
        started = time.monotonic()
        rc = subprocess.call(pytest, cwd=ROOT, env=env)
        say(f"pytest exited {rc} after {time.monotonic() - started:.0f}s")
        transactions, queries = pooled_traffic(params, port, test_db)
        say(f"through PgBouncer to {test_db}: {transactions:,} transactions, {queries:,} queries")
        if rc == 0 and not transactions:
            say("no transaction went through PgBouncer: the tests did not use it")
            return 1
        return rc
    except KeyboardInterrupt:
        return 130
    finally:
        stop(proc)
        if os.environ.get("PGBOUNCER_LOG"):
            say(f"pgbouncer log:\n{tail(log, 200)}")
        try:
            recreate_database(params, test_db, create=False)
        except Exception as exc:
            say(f"could not drop {test_db}: {exc}")
        shutil.rmtree(folder, ignore_errors=True)
        if embedded is not None:
            embedded.stop()


def version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return out.split("\n", 1)[0].replace("PgBouncer", "").strip() or "?"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
