# The README's two commands: `make run` and `make test`. Both install what they need.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
DEVDB   := $(PY) scripts/devdb.py run --
PORT    ?= 8000
PYTEST_ARGS ?=
# A whole-suite `make test` measures branch coverage of workqueue/ and operations/ (worker
# subprocesses included) and fails under COV_FLOOR; a subset run (PYTEST_ARGS=...) does not.
COV_FLOOR ?= 90
COV_ARGS ?= $(if $(PYTEST_ARGS),,--cov --cov-report=term-missing:skip-covered --cov-fail-under=$(COV_FLOOR))

VENV52  ?= .venv-django52
STAMP52 := $(VENV52)/.installed

# The documentation site's tools (requirements/docs.txt) live in their own virtualenv, so
# `make test` never installs them.
VENVDOCS  ?= .venv-docs
STAMPDOCS := $(VENVDOCS)/.installed
DOCS_PORT ?= 8001

# The browser tests (tests/browser/): Playwright (requirements/browser.txt) in its own
# virtualenv, driving Debian's Chromium (apt-get installs it when missing; no browser download).
VENVBROWSER  ?= .venv-browser
STAMPBROWSER := $(VENVBROWSER)/.installed
CHROMIUM     ?= /usr/bin/chromium
BROWSER_DEVDB_NAME ?= workqueue_browser

.PHONY: run run-fresh test test-browser test-django52 test-embed test-pgbouncer mutants lint format bench bench-peers check venv clean \
	docs docs-serve docs-reference

$(STAMP): requirements/base.txt requirements/dev.txt pyproject.toml
	@PYBIN=$$(scripts/find-python) || exit 1; \
	 if [ ! -x $(PY) ]; then echo "creating $(VENV) with $$PYBIN"; "$$PYBIN" -m venv $(VENV) || exit 1; fi
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -r requirements/dev.txt -e .
	@touch $(STAMP)

venv: $(STAMP)

$(STAMP52): requirements/base.txt requirements/dev.txt requirements/django52.txt pyproject.toml
	@PYBIN=$$(scripts/find-python) || exit 1; \
	 if [ ! -x $(VENV52)/bin/python ]; then echo "creating $(VENV52) with $$PYBIN"; "$$PYBIN" -m venv $(VENV52) || exit 1; fi
	$(VENV52)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(VENV52)/bin/python -m pip install -q --disable-pip-version-check -r requirements/django52.txt -e .
	@touch $(STAMP52)

$(STAMPDOCS): requirements/docs.txt
	@PYBIN=$$(scripts/find-python) || exit 1; \
	 if [ ! -x $(VENVDOCS)/bin/python ]; then echo "creating $(VENVDOCS) with $$PYBIN"; "$$PYBIN" -m venv $(VENVDOCS) || exit 1; fi
	$(VENVDOCS)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(VENVDOCS)/bin/python -m pip install -q --disable-pip-version-check -r requirements/docs.txt
	@touch $(STAMPDOCS)

$(STAMPBROWSER): requirements/base.txt requirements/dev.txt requirements/browser.txt pyproject.toml
	@PYBIN=$$(scripts/find-python) || exit 1; \
	 if [ ! -x $(VENVBROWSER)/bin/python ]; then echo "creating $(VENVBROWSER) with $$PYBIN"; "$$PYBIN" -m venv $(VENVBROWSER) || exit 1; fi
	$(VENVBROWSER)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(VENVBROWSER)/bin/python -m pip install -q --disable-pip-version-check -r requirements/browser.txt -e .
	@touch $(STAMPBROWSER)

$(CHROMIUM):
	apt-get update && apt-get install -y chromium

## run: the demo site: database, migrations, a worker, the admin, demo work.
run: $(STAMP)
	$(DEVDB) $(PY) scripts/run_demo.py --port $(PORT)

## run-fresh: the same, from empty tables (drops what a previous run left: backlog, operations, users).
run-fresh: $(STAMP)
	$(DEVDB) $(PY) scripts/run_demo.py --port $(PORT) --fresh

## test: the whole suite against a real PostgreSQL.
test: $(STAMP)
	$(DEVDB) $(PY) -m pytest $(COV_ARGS) $(PYTEST_ARGS)

## test-browser: every admin page in Debian's Chromium (Playwright, a live server on the test
## database, a strict CSP): no console error, no horizontal scrollbar at 1280 px, for a superuser
## and a view-only user; screenshots in build/screenshots/.
test-browser: $(STAMPBROWSER) $(CHROMIUM)
	WQ_BROWSER_TESTS=1 CHROMIUM=$(CHROMIUM) DEVDB_NAME=$(BROWSER_DEVDB_NAME) \
	 $(VENVBROWSER)/bin/python scripts/devdb.py run -- \
	 $(VENVBROWSER)/bin/python -m pytest --ds=tests.browser_settings -p no:cacheprovider tests/browser $(PYTEST_ARGS)

## test-django52: the whole suite on Django 5.2 LTS + the django-tasks backport.
test-django52: $(STAMP52)
	$(VENV52)/bin/python scripts/devdb.py run -- $(VENV52)/bin/python -m pytest $(PYTEST_ARGS)

## test-embed: build the wheel and sdist, install the wheel into a fresh `startproject` site
## (Django 6 and 5.2) with the README's steps, and check every admin page and command there.
EMBED_DATABASE_NAME ?= workqueue_embed
test-embed: $(STAMP)
	DEVDB_NAME=$(EMBED_DATABASE_NAME) $(DEVDB) $(PY) scripts/embed_check.py $(EMBED_ARGS)

## test-pgbouncer: the worker-process, operations and wire tests through a real PgBouncer in transaction mode.
test-pgbouncer: $(STAMP)
	$(PY) scripts/pgbouncer_test.py $(PYTEST_ARGS)

## mutants: inject each of scripts/mutants.py's small defects (SQL statements, the worker's
## accounting) in a scratch copy with its own database, run the tests that must catch it, print
## a table of caught / survived; fails if any survives. Minutes long: not run by CI (see the
## README). MUTANTS_ARGS: mutant names or globs, --jobs N, --list, --check, --no-baseline.
mutants: $(STAMP)
	$(PY) scripts/mutants.py $(MUTANTS_ARGS)

## check: Django's system checks and the migrations-are-committed check.
check: $(STAMP)
	$(DEVDB) sh -c '$(PY) manage.py check --fail-level WARNING && $(PY) manage.py makemigrations --check --dry-run'

## lint: ruff (format and rules) over everything, mypy with django-stubs over workqueue/ and
## operations/ (config in pyproject.toml).
lint: $(STAMP)
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

## bench: throughput and latency figures (see docs/performance.md).
bench: $(STAMP)
	$(DEVDB) $(PY) manage.py benchqueue $(BENCH_ARGS)

## bench-peers: our drain beside PgQueuer and Procrastinate (pinned in requirements/peers.txt,
## installed into .venv-peers, never into .venv), same jobs, same N, same processes, one run.
bench-peers: $(STAMP)
	$(DEVDB) $(PY) manage.py benchpeers $(PEERS_ARGS)

## docs-reference: write docs/reference/settings.md, commands.md and data-model.md from the code
## (no database).
docs-reference: $(STAMP)
	$(PY) scripts/docs_reference.py

## docs: the documentation site (MkDocs, Material theme) built with --strict into site/: a broken
## link, a page missing from the nav or a docstring that does not render fails the build.
docs: docs-reference $(STAMPDOCS)
	NO_MKDOCS_2_WARNING=1 $(VENVDOCS)/bin/mkdocs build --strict --site-dir site

## docs-serve: the same site served with live reload on http://127.0.0.1:$(DOCS_PORT)/.
docs-serve: docs-reference $(STAMPDOCS)
	NO_MKDOCS_2_WARNING=1 $(VENVDOCS)/bin/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

clean:
	rm -rf $(VENV) $(VENV52) $(VENVDOCS) $(VENVBROWSER) build/screenshots .venv-peers .pytest_cache .ruff_cache .mypy_cache site
