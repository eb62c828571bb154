# dbqueue development tasks. `make` (or `make help`) lists them.
#
# Everything runs from a virtualenv in $(VENV), created on first use with the
# Python >= 3.12 that scripts/find-python picks (set PYTHON= to choose one).
# The project is reinstalled into it only when pyproject.toml changes.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A second venv with Django 5.2 LTS (see test-django52).
VENV52 ?= .venv-django52
STAMP52 := $(VENV52)/.installed
# A third with SQLAlchemy 2.0, the lowest the package accepts (see test-sqlalchemy20).
VENV20 ?= .venv-sqlalchemy20
STAMP20 := $(VENV20)/.installed
PYTEST_ARGS ?=
BENCH_ARGS ?=
DEMO_ARGS ?=
CHAOS_MINUTES ?= 10
CHAOS_ARGS ?=
LOADTEST_ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help venv browser pgbouncer demo demo-spark test test-soak test-fast test-spark-cluster test-django52 test-sqlalchemy20 chaos loadtest bench bench-quick bench-sync-off bench-ring-storage bench-compaction-cost bench-ring-when-full bench-lease bench-ring-partitions bench-spark-archive bench-spark-push bench-spark-stream lint format typecheck check screenshots docs docs-serve clean distclean

help: ## List the targets with a one-line description
	@echo "Usage: make <target> [VENV=.venv] [PYTHON=/path/to/python3.12] [PYTEST_ARGS=...]"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## Create the venv with Python >= 3.12 and install dbqueue[dev] (editable)

# (Re)create the venv if it is missing or its interpreter no longer runs or is
# older than 3.12, then install. The stamp makes re-runs instant.
$(STAMP): pyproject.toml
	@if ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
		python="$$(scripts/find-python)" || exit 1; \
		if [ -e "$(VENV)" ] && [ ! -f "$(VENV)/pyvenv.cfg" ]; then \
			echo "$(VENV) exists and is not a virtualenv; remove it or set VENV=" >&2; exit 1; \
		fi; \
		echo "Creating $(VENV) with $$python"; \
		"$$python" -m venv --clear "$(VENV)" || exit 1; \
	fi
	$(PY) -m pip install --upgrade pip
	@echo "$(PY) -m pip install -e '.[dev]'"
	@$(PY) -m pip install -e '.[dev]' || { \
		echo "make: installing dbqueue[dev] into $(VENV) failed. If a package has no wheel for" >&2; \
		echo "this Python ($$($(PY) -V 2>&1)), recreate the venv with a Python 3.12:" >&2; \
		echo "    make distclean && PYTHON=/path/to/python3.12 make venv" >&2; \
		exit 1; }
	@touch $@

# Debian's chromium, which the browser tests (marker `browser`: the admin's pages at 1280x800)
# drive through Playwright, and `make screenshots` uses. CI starts from a fresh machine, so
# `make test` installs it when it is missing; under CI a browser test fails without it.
browser: ## Install Debian's chromium for the browser tests and screenshots, if missing
	@if [ ! -x /usr/bin/chromium ]; then \
		sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		echo "Installing Debian's chromium (apt-get)"; \
		$$sudo apt-get update -q && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium || { \
			echo "make: installing chromium failed; the browser tests need /usr/bin/chromium" >&2; \
			exit 1; }; \
	fi

# Debian's PgBouncer, which the deployment guide's tests (tests/example/test_deploy_pgbouncer.py)
# start from a config of their own, on a port of their own, never as a system service. CI
# starts from a fresh machine, so `make test` installs it when it is missing.
pgbouncer: ## Install Debian's pgbouncer for the deployment guide's tests, if missing
	@if [ ! -x /usr/sbin/pgbouncer ]; then \
		sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		echo "Installing Debian's pgbouncer (apt-get)"; \
		$$sudo apt-get update -q && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends pgbouncer || { \
			echo "make: installing pgbouncer failed; the PgBouncer tests need /usr/sbin/pgbouncer" >&2; \
			exit 1; }; \
	fi

demo: venv ## Run the example shop's demo (embedded PostgreSQL unless DATABASE_URL is set)
	cd example_project && $(abspath $(PY)) manage.py demo

demo-spark: venv ## Spark demo: 1M page views pushed from a DataFrame, drained, archived to Parquet, charted
	cd example_project && $(abspath $(PY)) manage.py demospark $(DEMO_ARGS)

# One run_tests.py for every suite, so the log ends on the whole run's total (CI reads its last
# line, "N passed, N failed, N skipped in T s").
# The docs are built first (strict): a broken link or docstring reference fails the run;
# browser installs the Chromium the admin's layout test drives.
test: venv docs browser pgbouncer $(STAMP52) $(STAMP20) ## Build the docs (strict), run the whole test suite (PostgreSQL and SQLite), then the Django 5.2 LTS and SQLAlchemy 2.0 runs
	$(PY) scripts/run_tests.py --also django52 $(VENV52)/bin/python --also sqlalchemy20 $(VENV20)/bin/python $(PYTEST_ARGS)

# The soak tests (marker `soak`): minutes of load each, the whole benchmark through every system,
# a short chaos run, the load test, the Spark demo. `make test` leaves them out to stay under
# 20 minutes on 2 cores (tests/conftest.py, --soak); run them before a release and after
# changing the bench, the chaos run or the demos.
test-soak: venv ## Run the soak tests only (whole bench, chaos, load test, Spark demo), about 15 minutes
	$(PY) scripts/run_tests.py --soak=only $(PYTEST_ARGS)

# The edit-test loop: what needs neither PostgreSQL nor Spark (unit tests, SQLite), without the
# solo storage tests. The whole suite, and CI, is `make check`.
test-fast: venv ## Run the unit and SQLite tests only (no PostgreSQL, no Spark), in under 3 minutes
	$(PY) -m pytest -n auto --dist loadgroup --solo=exclude -m "not postgresql and not spark" $(PYTEST_ARGS)

# The data source on a Spark standalone cluster (a master and two workers, each a JVM of its own,
# started and stopped by the tests themselves): every cluster test, the long ones too. `make
# test` runs the short set (write, read, a processingTime stream, the archive job).
test-spark-cluster: venv ## Run every Spark standalone-cluster test (write, read, each stream trigger, archive), about 2 minutes
	$(PY) scripts/run_tests.py tests/spark/test_cluster.py -m spark_cluster --spark-cluster=full $(PYTEST_ARGS)

loadtest: venv ## Load-test the example shop under gunicorn, with its worker stopped, killed and its connections cut (about 5 minutes); report in bench/results/<date>-loadtest
	$(PY) -m bench.loadtest $(LOADTEST_ARGS)

bench: venv ## Run the full benchmark (every system and workload); report in bench/results/<date>
	$(PY) -m bench $(BENCH_ARGS)

chaos: venv ## Chaos run: kills, PostgreSQL crash-restarts, stops, long transactions; then a total-queue check (CHAOS_MINUTES=10)
	$(PY) -m bench.chaos --minutes $(CHAOS_MINUTES) $(CHAOS_ARGS)

bench-quick: venv ## Run the benchmark on small sizes (under 3 minutes)
	$(PY) -m bench --quick $(BENCH_ARGS)

bench-sync-off: venv ## Run the benchmark with synchronous_commit off (reported separately)
	$(PY) -m bench --sync-commit off $(BENCH_ARGS)

bench-ring-storage: venv ## Measure the ring table's fillfactor (50/70/90/100), about 6 minutes
	$(PY) -m bench.ring_storage $(BENCH_ARGS)

bench-compaction-cost: venv ## Measure how long compaction holds a queue's lock, by rows copied (about 3 minutes)
	$(PY) -m bench.compaction_cost $(BENCH_ARGS)

bench-ring-when-full: venv ## Measure when_full: a spilling ring's hot path, a spilled push, bytes per slot (about 2 minutes)
	$(PY) -m bench.ring_when_full $(BENCH_ARGS)

bench-lease: venv ## Measure how soon a killed worker's items come back, by lease (60/15/10 s), about 25 minutes
	$(PY) -m bench.lease $(BENCH_ARGS)

bench-ring-partitions: venv ## Measure the ring's hot paths with its slot table in 1, 2, 4, 8 partitions (about 6 minutes)
	$(PY) -m bench.ring_partitions $(BENCH_ARGS)

bench-spark-archive: venv ## Measure the Spark archive job on 1M done items (3 batch sizes), about 4 minutes
	$(PY) -m bench.spark_archive $(BENCH_ARGS)

bench-spark-push: venv ## Measure the Spark bulk push vs push_many (1M split, 200k ring), about 5 minutes
	$(PY) -m bench.spark_push $(BENCH_ARGS)

bench-spark-stream: venv ## Measure draining a queue with readStream per trigger (200k split, 100k ring), about 5 minutes
	$(PY) -m bench.spark_stream $(BENCH_ARGS)

# The supported Django versions are 5.2 LTS and 6.x: the Django-facing tests run once more in
# a second venv with Django 5.2 (the main venv has the newest 6.x).

$(STAMP52): pyproject.toml | venv
	@if ! $(VENV52)/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
		"$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv --clear "$(VENV52)" || exit 1; \
	fi
	$(VENV52)/bin/python -m pip install -q --upgrade pip
	$(VENV52)/bin/python -m pip install -q -e '.[dev]' 'django>=5.2,<5.3'
	@touch $@

# The tests it runs, and why only those: SUITES in scripts/run_tests.py.
test-django52: $(STAMP52) ## Run the Django and conformance tests on Django 5.2 LTS
	$(PY) scripts/run_tests.py --no-main --also django52 $(VENV52)/bin/python $(PYTEST_ARGS)

# SQLAlchemy: the package accepts 2.0 and 2.1; the main venv has the newest 2.1, this one the
# newest 2.0.
$(STAMP20): pyproject.toml | venv
	@if ! $(VENV20)/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
		"$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv --clear "$(VENV20)" || exit 1; \
	fi
	$(VENV20)/bin/python -m pip install -q --upgrade pip
	$(VENV20)/bin/python -m pip install -q -e '.[dev]' 'sqlalchemy[asyncio]>=2.0.36,<2.1'
	@touch $@

test-sqlalchemy20: $(STAMP20) ## Run the SQLAlchemy and Alembic tests on SQLAlchemy 2.0
	$(PY) scripts/run_tests.py --no-main --also sqlalchemy20 $(VENV20)/bin/python $(PYTEST_ARGS)

lint: venv ## Check the code with ruff (lint and formatting)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv ## Format the code with ruff and apply ruff's safe fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

typecheck: venv ## Type-check the three packages and the bench with mypy (strict)
	$(VENV)/bin/mypy dbqueue dbqueue_django dbqueue_sa bench

check: lint typecheck test ## Run lint, typecheck and the whole test suite (what CI runs)

screenshots: venv browser ## Retake the admin screenshots in docs/images (1280 px wide, headless chromium)
	$(PY) scripts/admin_screenshots.py

docs: venv ## Build the documentation into site/ (mkdocs --strict)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: venv ## Serve the documentation with live reload on http://127.0.0.1:8000
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

clean: ## Remove build output and tool caches (keeps the venv)
	rm -rf build/ site/ .pytest_cache .mypy_cache .ruff_cache example_project/demo-data

distclean: clean ## Remove everything clean removes, and the venvs
	rm -rf "$(VENV)" "$(VENV52)" "$(VENV20)"
