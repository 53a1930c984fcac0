"""Install the built wheel into a fresh ``startproject`` site and check that everything works there.

``make test-embed`` runs it (CI runs it after ``make test``). The test suite runs inside the
demo project, which can hide what only a real embedding site would see (a template the wheel
lacks, a setting only the demo has). So, once per Django version ("leg"):

1. build the sdist and the wheel (``python -m build``) and check both file lists, both ways:
   every file of the two packages is in them, nothing from ``tests/``, ``project/``, ``bench/``
   or the demo's top-level ``templates/`` (a site without that folder gets every page: step 4);
2. install the wheel into a new virtualenv outside the repository (nothing of the repository on
   ``PYTHONPATH``, run from a temporary directory) and ``django-admin startproject mysite``;
3. apply the README's "Add it to your site" blocks verbatim (read from README.md, so the README
   cannot drift), ``migrate``, and add a small app with a queue handler, an operation kind and
   a django.tasks task;
4. enqueue and drain with a real ``runworker`` process; poll one item over the wire with the
   official ``anthropic`` SDK against ``runserver``; render every admin page of both apps as a
   superuser; run ``recover`` and ``reap``; ``check --deploy`` reports none of our check ids.

Needs ``DATABASE_URL`` (``scripts/devdb.py run --`` sets it); each leg creates its own database
``<that name>_<leg>`` afresh and drops it afterwards. Usage::

    python scripts/embed_check.py [--leg django6] [--leg django52] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import zipfile
from dataclasses import dataclass, field
from html import unescape as html_unescape
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workqueue", "operations")
DIST_NAME = "django-workqueue-operations"

# What each leg installs next to the wheel (mirrors requirements/base.txt and django52.txt).
LEGS = {
    "django6": {"wheel_extra": "", "requirements": ["Django>=6.0,<6.2"]},
    "django52": {"wheel_extra": "[tasks]", "requirements": ["Django>=5.2,<5.3", "django-tasks>=0.8,<1"]},
}
ADMIN_USER, ADMIN_PASSWORD = "admin", "embed-check-password-1"
TIMEOUT = 180  # seconds any one command may take on a loaded machine


class CheckFailed(Exception):
    """A check of the embedded site did not hold."""


def say(msg: str) -> None:
    print(msg, flush=True)


@dataclass
class Leg:
    name: str
    passed: list[str] = field(default_factory=list)
    failed: str | None = None
    seconds: float = 0.0


# -- the README's steps -------------------------------------------------------------------------


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Return (language, body) for every fenced code block in markdown ``text``."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def section(text: str, heading: str) -> str:
    """Return the markdown under ``heading`` up to the next heading (outside code blocks)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1
    fenced = False
    for i in range(start, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#+ ", lines[i]):
            return "".join(lines[start:i])
    return "".join(lines[start:])


@dataclass
class Steps:
    pip_line: str
    settings: str
    urls: str
    commands: list[list[str]]
    tasks_settings: str
    wire_settings: str


def readme_steps() -> Steps:
    """Read the blocks a site applies from README.md ("Add it to your site") and the docs."""
    readme = (ROOT / "README.md").read_text()
    blocks = fenced_blocks(section(readme, "## Add it to your site"))
    sh = [body for lang, body in blocks if lang == "sh"]
    py = [body for lang, body in blocks if lang == "python"]
    settings = [b for b in py if b.startswith("# settings.py\n")]
    urls = [b for b in py if b.startswith("# urls.py\n")]
    if len(sh) != 2 or len(settings) != 1 or len(urls) != 1:
        raise CheckFailed(
            "README 'Add it to your site' should hold a pip block, one '# settings.py' block, "
            "one '# urls.py' block and a block of manage.py commands"
        )
    commands = [line.split()[2:] for line in sh[1].splitlines() if line.startswith("python manage.py ")]
    tasks = [
        b
        for lang, b in fenced_blocks(section(readme, "### Use it as your django.tasks backend"))
        if lang == "python" and b.startswith("# settings.py\n")
    ]
    docs = (ROOT / "docs" / "self-hosted-workers.md").read_text()
    wire = [b for lang, b in fenced_blocks(section(docs, "## Set it up")) if b.startswith("# settings.py\n")]
    if len(tasks) != 1 or len(wire) != 1:
        raise CheckFailed("expected one settings block for TASKS in the README and one in docs/self-hosted-workers.md")
    wire_settings = wire[0].split("\n# urls.py", 1)[0]  # that block goes on with urls the README has covered
    return Steps(sh[0].strip(), settings[0], urls[0], commands, tasks[0], wire_settings)


# -- build and contents -------------------------------------------------------------------------


def package_files() -> set[str]:
    """Every file of the two packages in the source tree (what the wheel must carry)."""
    out = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.add(path.relative_to(ROOT).as_posix())
    return out


def build(dist: Path) -> tuple[Path, Path]:
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=dist.parent, quiet=True)
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise CheckFailed(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
    return wheels[0], sdists[0]


def check_contents(wheel: Path, sdist: Path) -> str:
    """Check both file lists both ways; return a short listing for the log."""
    expected = package_files()
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if not n.endswith("/")}
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/", 1)[0]
        in_sdist = {m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile() and "/" in m.name}
    problems = []
    for label, names, extra_ok in (
        ("wheel", in_wheel, lambda n: n.split("/", 1)[0].endswith(".dist-info")),
        (
            "sdist",
            in_sdist,
            lambda n: (
                n in {"PKG-INFO", "README.md", "pyproject.toml", "setup.cfg", "MANIFEST.in"}
                or n.split("/", 1)[0].endswith(".egg-info")
            ),
        ),
    ):
        if missing := sorted(expected - names):
            problems.append(f"{label} lacks {missing}")
        if stray := sorted(n for n in names - expected if not extra_ok(n)):
            problems.append(f"{label} carries files that are not the apps' own: {stray}")
        for pkg in PACKAGES:
            for what, pattern in (
                ("SQL files", rf"^{pkg}/sql/\w+\.sql$"),
                ("templates", rf"^{pkg}/templates/admin/{pkg}/.+\.html$"),
                ("static files", rf"^{pkg}/static/{pkg}/.+\.(css|js)$"),
                ("migrations", rf"^{pkg}/migrations/0001_initial\.py$"),
                ("py.typed", rf"^{pkg}/py\.typed$"),
            ):
                if not any(re.match(pattern, n) for n in names):
                    problems.append(f"{label} has no {what} for {pkg}")
        for banned in ("tests/", "project/", "bench/", "scripts/", "requirements/", "docs/", "templates/"):
            if bad := sorted(n for n in names if n.startswith(banned)):
                problems.append(f"{label} carries {bad}")
    if problems:
        raise CheckFailed("; ".join(problems))
    kinds = {}
    for n in in_wheel:
        parts = n.split("/")
        key = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
        kinds[key] = kinds.get(key, 0) + 1
    listing = ", ".join(f"{k} ({v})" for k, v in sorted(kinds.items()))
    return f"wheel {len(in_wheel)} files, sdist {len(in_sdist)} files ({top}); wheel: {listing}"


# -- processes ----------------------------------------------------------------------------------


def run(cmd, *, cwd: Path, env: dict | None = None, quiet: bool = False, check: bool = True, timeout=TIMEOUT):
    """Run ``cmd``; on failure raise CheckFailed with the end of its output."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise CheckFailed(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{tail}")
    if not quiet and proc.stdout.strip():
        for line in proc.stdout.strip().splitlines()[-5:]:
            say(f"      | {line}")
    return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_params(url: str) -> dict:
    u = urlparse(url)
    host = u.hostname or parse_qs(u.query).get("host", ["127.0.0.1"])[0]
    return {
        "HOST": unquote(host),
        "PORT": str(u.port or 5432),
        "USER": unquote(u.username or "postgres"),
        "PASSWORD": unquote(u.password or ""),
        "NAME": u.path.lstrip("/"),
    }


def recreate_database(params: dict, name: str, *, drop_only: bool = False) -> None:
    import psycopg
    from psycopg import sql

    conninfo = {k.lower(): v for k, v in params.items() if k != "NAME" and v}
    with psycopg.connect(dbname=params["NAME"], autocommit=True, **conninfo) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if not drop_only:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


# -- the site's own code (not from the README: what any site adds for its own work) -------------

#: The site's own code (not from the README: what any site adds for its own work) and the
#: scripts run in it, as real files ruff checks (scripts/embed_site/).
EMBED_SITE = Path(__file__).with_name("embed_site")


def embed_json(proc) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith("EMBED_JSON "):
            return json.loads(line.split(" ", 1)[1])
    raise CheckFailed(f"no EMBED_JSON line in:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


# -- one leg ------------------------------------------------------------------------------------


class Site:
    """A fresh virtualenv and a ``startproject`` site in a temporary directory."""

    def __init__(self, leg: str, tmp: Path, params: dict):
        self.leg, self.tmp, self.params = leg, tmp, params
        self.venv = tmp / "venv"
        self.dir = tmp / "mysite"
        self.python = self.venv / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
        env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.venv),
            PYTHONNOUSERSITE="1",
            PYTHONUNBUFFERED="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
        )
        self.env = env

    def manage(self, *args, env: dict | None = None, **kwargs):
        return run([str(self.python), "manage.py", *args], cwd=self.dir, env=env or self.env, **kwargs)

    def shell(self, code: str, **env: str):
        """Run ``code`` in the site (``manage.py shell -c``), with ``env`` added to its environment."""
        return self.manage("shell", "-c", code, env={**self.env, **env}, quiet=True)


def check_leg(leg: Leg, wheel: Path, steps: Steps, url: str, keep: bool) -> None:
    """One Django version's fresh site, built and checked stage by stage; a failure ends the leg."""
    run_ = LegRun(leg, url)
    try:
        run_.install(wheel)
        run_.make_site(steps)
        run_.first_commands(steps)
        ids = run_.run_work()
        env_out = run_.documented_commands()
        base_url = run_.serve()
        check_wire(base_url, env_out["id"], env_out["key"])
        run_.step("the anthropic SDK polled sess_42, acked, heartbeat, stopped it")
        run_.admin_and_deploy(base_url, ids["op"])
    except Exception as exc:  # any failure ends this leg; the next leg still runs
        run_.failed(exc)
    finally:
        run_.finish(keep)


class LegRun:
    """The state of one leg's check: its temporary folder, site, database and server."""

    def __init__(self, leg: Leg, url: str):
        self.leg = leg
        self.spec = LEGS[leg.name]
        self.base = database_params(url)
        self.db_name = f"{self.base['NAME']}_{leg.name}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"embed-{leg.name}-"))
        self.site = Site(leg.name, self.tmp, self.base)
        self.server: subprocess.Popen | None = None
        self.started = time.monotonic()

    def step(self, name: str) -> None:
        self.leg.passed.append(name)
        say(f"  [{self.leg.name}] ok   {name}  ({time.monotonic() - self.started:.0f} s)")

    def install(self, wheel: Path) -> None:
        site, spec = self.site, self.spec
        run([sys.executable, "-m", "venv", str(site.venv)], cwd=self.tmp)
        wheel_req = f"{DIST_NAME}{spec['wheel_extra']} @ {wheel.as_uri()}"
        run(
            [str(site.python), "-m", "pip", "install", "-q", "--no-compile", wheel_req, *spec["requirements"]],
            cwd=self.tmp,
            env=site.env,
        )
        self.step(
            f"pip install the wheel{spec['wheel_extra']} + {' '.join(spec['requirements'])} into a new virtualenv"
        )
        found = run(
            [
                str(site.python),
                "-c",
                "import django, workqueue, operations; print(django.get_version(), workqueue.__file__)",
            ],
            cwd=self.tmp,
            env=site.env,
            quiet=True,
        ).stdout.split()
        if not found[1].startswith(str(site.venv)) or found[1].startswith(str(ROOT)):
            raise CheckFailed(f"workqueue imported from {found[1]}, not from the new virtualenv")
        self.step(f"Django {found[0]}; workqueue imported from the virtualenv's site-packages")

    def make_site(self, steps: Steps) -> None:
        site = self.site
        run([str(site.venv / "bin" / "django-admin"), "startproject", "mysite"], cwd=self.tmp, env=site.env)
        settings_py = site.dir / "mysite" / "settings.py"
        with settings_py.open("a") as f:
            f.write("\n\n" + steps.settings)
        with (site.dir / "mysite" / "urls.py").open("a") as f:
            f.write("\n\n" + steps.urls)
        self.step("startproject mysite; README's settings.py and urls.py blocks appended verbatim")

        # The site's own choices, not the README's: its PostgreSQL, its app, the documented
        # django.tasks and wire settings.
        recreate_database(self.base, self.db_name)
        database = {"ENGINE": "django.db.backends.postgresql", **self.base, "NAME": self.db_name}
        site.manage("startapp", "shop", quiet=True)
        for name in ("apps.py", "handlers.py", "kinds.py", "tasks.py"):
            (site.dir / "shop" / name).write_text((EMBED_SITE / "shop" / name).read_text())
        with settings_py.open("a") as f:
            f.write(
                "\n\n# The site's own: its PostgreSQL database, its app, where collectstatic puts files.\n"
                f"DATABASES = {{'default': {database!r}}}\n"
                'INSTALLED_APPS += ["shop"]\n'
                'STATIC_ROOT = BASE_DIR / "collected-static"\n\n' + steps.tasks_settings + "\n\n" + steps.wire_settings
            )
        self.step("site app 'shop': a handler for 'emails', the kind 'shop.export', a task; TASKS and the wire queue")

    def first_commands(self, steps: Steps) -> None:
        site = self.site
        for command in steps.commands:
            site.manage(*command)
        self.step("README's commands: " + "; ".join(" ".join(c) for c in steps.commands))

        out = site.manage("check", quiet=True)
        if "no issues" not in out.stdout + out.stderr:
            raise CheckFailed(f"manage.py check reported issues:\n{out.stdout}{out.stderr}")
        site.manage("makemigrations", "--check", "--dry-run", quiet=True)
        self.step("check: no issues; makemigrations --check: no changes")

        site.manage("collectstatic", "--noinput", quiet=True)
        for name in ("workqueue/admin.css", "operations/live.js", "operations/live.css"):
            if not (site.dir / "collected-static" / name).is_file():
                raise CheckFailed(f"collectstatic did not collect {name}")
        self.step("collectstatic collected the apps' CSS and JavaScript")

    def run_work(self) -> dict:
        site = self.site
        site.manage("enqueue", "emails", "welcome:1", "--json", quiet=True)
        ids = embed_json(site.shell((EMBED_SITE / "start_work.py").read_text()))
        site.manage("runworker", "--max-items", "3", "--max-seconds", "120", "--worker-id", f"embed-{self.leg.name}")
        got = embed_json(site.shell((EMBED_SITE / "read_outcomes.py").read_text(), EMBED_IDS=json.dumps(ids)))
        want = {
            "op_state": "succeeded",
            "op_done": True,
            "op_units": [2, 2],
            "item_state": "stopped",
            "item_outcome": "succeeded",
            "task_status": "SUCCESSFUL",
            "task_return": 5,
        }
        if got != want:
            raise CheckFailed(f"after runworker: {got}, expected {want}")
        if (site.dir / "sent.txt").read_text().split() != ["welcome:1"]:
            raise CheckFailed("the 'emails' handler did not run exactly once")
        self.step("runworker (a real process) ran the handler, the operation and the task: all succeeded")
        return ids

    def documented_commands(self) -> dict:
        site = self.site
        env_out = json.loads(
            site.manage("environments", "create", "byoc", "--kind", "self_hosted", "--json", quiet=True).stdout
        )
        json.loads(site.manage("apikeys", "create", "control-plane", "--json", quiet=True).stdout)
        site.manage("enqueue", "tool_exec", "sess_42", "--environment", "byoc", "--json", quiet=True)
        # A schedule made by the documented command (its admin pages need one to open).
        site.manage("schedules", "add", "hourly-digest", "--every", "3600", "--queue", "emails", quiet=True)
        json.loads(site.manage("schedules", "list", "--json", quiet=True).stdout)
        # A runtime queue control made by the documented command (its admin pages need one too).
        site.manage("queues", "set", "emails", "--max-running-per-group", "2", quiet=True)
        site.manage("queues", "pause", "emails", quiet=True)
        site.manage("queues", "resume", "emails", quiet=True)
        listed = json.loads(site.manage("queues", "list", "--json", quiet=True).stdout)["queues"]
        controls = {q["name"]: q for q in listed}
        if "emails" not in controls:
            raise CheckFailed(f"'queues list --json' does not list 'emails': {sorted(controls)}")
        pw_env = dict(site.env, DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD)
        site.manage(
            "createsuperuser", "--noinput", "--username", ADMIN_USER, "--email", "admin@example.com", env=pw_env
        )
        self.step(
            "environments, apikeys, enqueue --environment, schedules add, queues set/pause/resume, createsuperuser"
        )
        return env_out

    def serve(self) -> str:
        site = self.site
        port = free_port()
        log = (self.tmp / "runserver.log").open("w")
        self.server = subprocess.Popen(
            [str(site.python), "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=site.dir,
            env=site.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base_url = f"http://127.0.0.1:{port}"
        wait_for_server(base_url, self.server, self.tmp / "runserver.log")
        self.step(f"runserver on {base_url}")
        return base_url

    def admin_and_deploy(self, base_url: str, op_id: str) -> None:
        site = self.site
        for sweep in ("recover", "reap"):
            json.loads(site.manage(sweep, "--json", quiet=True).stdout.strip().splitlines()[-1])
        self.step("recover --json and reap --json ran and printed JSON (the admin lists their runs)")

        urls = embed_json(site.shell((EMBED_SITE / "admin_urls.py").read_text(), EMBED_ADMIN_USER=ADMIN_USER))
        if urls["missing"]:
            raise CheckFailed(f"no object to open these admin pages with: {urls['missing']}")
        pages = check_admin(base_url, urls["urls"], op_id)
        self.step(f"admin: {pages} pages of both apps (with every filter and sort) rendered 200 as a superuser")

        out = site.manage("check", "--deploy", quiet=True, check=False)
        ours = sorted(set(re.findall(r"\(((?:workqueue|operations)\.[A-Z]\d+)\)", out.stdout + out.stderr)))
        if ours:
            raise CheckFailed(f"check --deploy reports our ids {ours}:\n{out.stdout}{out.stderr}")
        theirs = sorted(set(re.findall(r"\((\w+\.[A-Z]\d+)\)", out.stdout + out.stderr)))
        self.step(f"check --deploy: none of ours (the project's own: {', '.join(theirs) or 'none'})")

    def failed(self, exc: Exception) -> None:
        leg = self.leg
        leg.failed = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, CheckFailed):
            traceback.print_exc()
        say(f"  [{leg.name}] FAIL {leg.failed}")
        if self.server is not None:
            say(f"  [{leg.name}] runserver log (end):\n{(self.tmp / 'runserver.log').read_text()[-3000:]}")

    def finish(self, keep: bool) -> None:
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.server.kill()
        self.leg.seconds = time.monotonic() - self.started
        if keep or self.leg.failed:
            say(f"  [{self.leg.name}] site kept in {self.tmp} (database {self.db_name})")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
            recreate_database(self.base, self.db_name, drop_only=True)


def wait_for_server(base_url: str, server: subprocess.Popen, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CheckFailed(f"runserver exited {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(base_url + "/admin/login/", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise CheckFailed("runserver did not answer within 60 s")


def check_wire(base_url: str, env_id: str, env_key: str) -> None:
    import anthropic

    with anthropic.Anthropic(base_url=base_url, auth_token=env_key, api_key=None, max_retries=0) as client:
        work = client.beta.environments.work
        item = work.poll(env_id, block_ms=999, anthropic_worker_id="embed-worker")
        if item is None or item.data.id != "sess_42":
            raise CheckFailed(f"the SDK's poll returned {item!r}, expected the item for sess_42")
        acked = work.ack(item.id, environment_id=env_id)
        beat = work.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
        stopped = work.stop(item.id, environment_id=env_id, force=True)
        if (acked.state, beat.state, beat.lease_extended, stopped.state) != ("starting", "active", True, "stopped"):
            raise CheckFailed(f"wire states: ack {acked.state}, heartbeat {beat}, stop {stopped.state}")


def check_admin(base_url: str, urls: list[list[str]], op_id: str) -> int:
    """Every admin page (each list with its filters and sorts), the static files they link, the
    operations API and /metrics; returns the pages viewed, raises CheckFailed naming each problem."""
    import httpx

    pages = AdminPages(op_id)
    with httpx.Client(base_url=base_url, timeout=60) as http:
        admin_login(http)
        seen = {name for name, _ in urls}
        for name in ("workqueue_dashboard", "workqueue_workitem_change", "operations_operation_change"):
            if name not in seen:
                pages.problems.append(f"the admin registers no {name}")
        for name, url in urls:
            pages.check(http, name, url)
        pages.check_statics(http)
        pages.check_api(http)
    anonymous = httpx.get(base_url + "/api/operations", timeout=30)
    if anonymous.status_code != 401 or anonymous.json().get("type") != "error":
        pages.problems.append(f"/api/operations without a login: {anonymous.status_code} {anonymous.text[:200]!r}")
    metrics = httpx.get(base_url + "/metrics", timeout=60)
    if metrics.status_code != 200 or "workqueue_queue_depth" not in metrics.text:
        pages.problems.append(f"/metrics: {metrics.status_code}")
    if pages.problems:
        raise CheckFailed("admin pages:\n    " + "\n    ".join(pages.problems))
    return pages.views


def admin_login(http) -> None:
    login = http.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
    r = http.post(
        "/admin/login/?next=/admin/",
        data={"username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/"},
    )
    if r.status_code != 302:
        raise CheckFailed(f"admin login answered {r.status_code}")


class AdminPages:
    """What the admin check found: the problems, the pages viewed and the static files linked."""

    def __init__(self, op_id: str):
        self.op_id = op_id
        self.problems: list[str] = []
        self.statics: set[str] = set()
        self.views = 0

    def check(self, http, name: str, url: str) -> None:
        """One admin URL, by what it is: a live stream, a redirect, a form's action, or a page."""
        self.views += 1
        if name.endswith("_watch"):  # Server-Sent Events: the done operation's snapshot, then the end
            self.check_stream(http, name, url)
            return
        r = http.get(url)
        if name == "workqueue_queuedashboard_changelist":
            # The admin index's "Queue dashboard" entry: a redirect to the dashboard, by design.
            if r.status_code != 302 or not r.headers.get("location", "").endswith("/workitem/dashboard/"):
                self.problems.append(f"{name} {url}: {r.status_code} {r.headers.get('location')!r}")
            return
        if r.status_code == 405 and r.headers.get("allow") == "POST":
            # A form's action (the dashboard's flow-control form), not a page: it refuses a
            # GET the Django way, and the dashboard must carry a form that posts to it.
            dashboard = http.get("/admin/workqueue/workitem/dashboard/").text
            if f'action="{url}"' not in dashboard:
                self.problems.append(f"{name} {url}: POST-only, and no dashboard form posts to it")
            return
        html = r.text
        if r.status_code != 200 or "TemplateDoesNotExist" in html or "</html>" not in html:
            self.problems.append(f"{name} {url}: {r.status_code} {html[:300]!r}")
            return
        self.statics.update(re.findall(r'(?:href|src)="(/static/(?:workqueue|operations)/[^"]+)"', html))
        if name.endswith("_changelist"):
            self.check_list_views(http, name, url, html)
        if name == "operations_operation_change" and url.rstrip("/").endswith(self.op_id):
            watch = f"/admin/operations/operation/{self.op_id}/watch/"
            for marker in ('id="op-live"', f'data-watch-url="{watch}"', 'id="op-initial"', "operations/live.js"):
                if marker not in html:
                    self.problems.append(f"the operation page has no {marker}")

    def check_stream(self, http, name: str, url: str) -> None:
        with http.stream("GET", url) as r:
            body = r.read().decode()
        ok = r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        if not ok or "event: operation" not in body:
            self.problems.append(f"{name} {url}: {r.status_code} {r.headers.get('content-type')} {body[:200]!r}")

    def check_list_views(self, http, name: str, url: str, html: str) -> None:
        """Each filter choice and column sort a change list offers."""
        for query in sorted(set(re.findall(r'href="(\?[^"#]*)"', html))):
            sub = http.get(url + html_unescape(query))
            self.views += 1
            if sub.status_code != 200 or "</html>" not in sub.text:
                self.problems.append(f"{name} {url}{query}: {sub.status_code}")

    def check_statics(self, http) -> None:
        for name in ("workqueue/admin.css", "operations/live.js", "operations/live.css"):
            if f"/static/{name}" not in self.statics:
                self.problems.append(f"no page links /static/{name}")
        for path in sorted(self.statics):
            r = http.get(path)
            if r.status_code != 200 or not r.content:
                self.problems.append(f"static {path}: {r.status_code}")
        if "Queue dashboard" not in http.get("/admin/workqueue/").text:
            self.problems.append("the workqueue app index does not link the queue dashboard")

    def check_api(self, http) -> None:
        op_id = self.op_id
        api = http.get("/api/operations")
        if api.status_code != 200 or op_id not in api.text:
            self.problems.append(f"/api/operations: {api.status_code} {api.text[:200]!r}")
        one = http.get(f"/api/operations/{op_id}")
        if one.status_code != 200 or one.json().get("done") is not True:
            self.problems.append(f"/api/operations/{op_id}: {one.status_code} {one.text[:200]!r}")
        with http.stream("GET", f"/api/operations/{op_id}/watch") as r:
            body = r.read().decode()
        if r.status_code != 200 or "event: operation" not in body:
            self.problems.append(f"/api/operations/{op_id}/watch: {r.status_code} {body[:200]!r}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leg", action="append", choices=sorted(LEGS), help="Django version(s) to try (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep each leg's site and database")
    opts = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL")
    if not url:
        say("embed_check: DATABASE_URL is not set (run it with: python scripts/devdb.py run -- ...)")
        return 2
    began = time.monotonic()
    legs = [Leg(name) for name in (opts.leg or list(LEGS))]
    work = Path(tempfile.mkdtemp(prefix="embed-build-"))
    try:
        try:
            steps = readme_steps()
            if DIST_NAME not in steps.pip_line:
                raise CheckFailed(f"README's pip line does not name {DIST_NAME}: {steps.pip_line}")
            say(f"embed: building the sdist and the wheel of {ROOT}")
            wheel, sdist = build(work / "dist")
            say(f"  ok   {wheel.name}, {sdist.name}: {check_contents(wheel, sdist)}")
        except (CheckFailed, subprocess.TimeoutExpired) as exc:
            say(f"embed: FAIL before any site was made: {exc}")
            return 1
        for leg in legs:
            say(f"embed: leg {leg.name}")
            check_leg(leg, wheel, steps, url, opts.keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"embed: summary ({time.monotonic() - began:.0f} s)")
    for leg in legs:
        verdict = f"FAIL ({leg.failed.splitlines()[0][:200]})" if leg.failed else "PASS"
        say(f"  {leg.name:9} {verdict}: {len(leg.passed)} checks passed in {leg.seconds:.0f} s")
    return 1 if any(leg.failed for leg in legs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
