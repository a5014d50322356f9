# Two entry points for a fresh machine: `make run` and `make test`.
# Both install what is missing (OS packages included) before they start.
#
# Python packages come from uv.lock, exactly: `uv sync --locked` installs the
# locked versions (every extra and the test, lint and docs groups) into .venv and
# refuses to run when pyproject.toml has changed and the lock has not.
# After adding or changing a dependency in pyproject.toml, run ONE command:
#
#     make lock        # re-resolves uv.lock; commit it with pyproject.toml
#
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv itself, pinned, in its own small venv (uv sync keeps .venv exactly as
# locked, so uv cannot live there).
UV_VERSION := 0.13.9
UV_HOME := .uv
UV := $(UV_HOME)/bin/uv
PG_BIN := /usr/lib/postgresql/15/bin
ZK_JAR := /usr/share/java/zookeeper.jar
# The TypeScript client (clients/typescript): its node_modules come from its
# committed package-lock.json, exactly (npm ci), as .venv comes from uv.lock.
TS := clients/typescript
TS_STAMP := $(TS)/node_modules/.installed

.PHONY: run test setup lock os-deps lint typecheck unit integration faults bench campaign docs ts-client clean

setup: os-deps $(STAMP) $(TS_STAMP)

# PostgreSQL 15 and Java come with the machine; ZooKeeper, promtool (which
# checks ops/prometheus in the tests) and libfaketime (the clock-jump fault
# test runs a worker under it) do not, nor Chromium and its WebDriver (the web
# console's browser tests drive them; Debian's packages, no browser download),
# nor valgrind (benchmarks.instructions counts the API's instructions with it),
# nor Node.js and npm (the TypeScript client's build and its test).
os-deps:
	@if [ ! -x $(PG_BIN)/initdb ] || [ ! -f $(ZK_JAR) ] || ! command -v java >/dev/null \
	    || ! command -v promtool >/dev/null || ! command -v faketime >/dev/null \
	    || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null \
	    || ! command -v valgrind >/dev/null || ! command -v npm >/dev/null; then \
	  echo "installing OS packages (postgresql-15, zookeeper, java, promtool, faketime, chromium, valgrind, nodejs)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends postgresql-15 zookeeper default-jre-headless prometheus \
	    faketime chromium chromium-driver valgrind $$(command -v npm >/dev/null || echo nodejs npm) >/dev/null; \
	fi

$(UV):
	$(PY) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q 'uv==$(UV_VERSION)'

$(STAMP): pyproject.toml uv.lock | $(UV)
	@$(UV) sync --locked --all-extras --python $(PY) -q || { \
	  echo "uv.lock does not match pyproject.toml: run 'make lock' and commit uv.lock" >&2; exit 1; }
	touch $(STAMP)

$(TS_STAMP): $(TS)/package.json $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(TS_STAMP)

# Regenerate the TypeScript client's types (clients/typescript/src/schema.d.ts)
# from the API's OpenAPI document; commit the result. The suite compares them
# with a live API's /openapi.json (tests/integration/test_typescript_client.py).
ts-client: $(STAMP) $(TS_STAMP)
	$(BIN)/python $(TS)/openapi_document.py > $(TS)/openapi.json
	cd $(TS) && npm run -s generate

# Re-resolve uv.lock after a change to pyproject.toml's dependencies.
lock: | $(UV)
	$(UV) lock --python $(PY)

run: setup
	$(BIN)/vakit up --demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest -q tests/unit

# The unit and contract tiers on both cores (pytest-xdist: CPU-bound, no
# timing in them; 274 s -> 154 s here), then the rest one test at a time: the
# integration and fault tests time processes, leases and sessions, and two of
# them at once on two cores made three of them fail in a trial run. The
# benchmarks' smoke tests time nothing (they count jobs and read reports):
# they run in the first stage, one file on one worker (--dist loadfile) beside
# the unit tests, 4.5 minutes that ran alone before. The 30 slowest of the
# second stage are listed at the end: where the suite's 30 minutes go.
BENCH_SMOKE := tests/integration/test_benchmarks.py
test: setup lint
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/unit tests/contract $(BENCH_SMOKE)
	$(BIN)/pytest -q -p no:cacheprovider --durations=30 tests --ignore=tests/unit --ignore=tests/contract \
	  --ignore=$(BENCH_SMOKE)

bench: setup
	$(BIN)/python -m benchmarks.wave

# The fault campaign (issue 46, docs/campaign.md): a real local cluster under
# load while a nemesis injects faults at random from SEED (random when not
# given; printed either way), then a checker writes $(OUT)/verdict.json.
# setup installs what it needs (libfaketime among the OS packages).
DURATION ?= 600
OUT ?= campaign-out
campaign: setup
	$(BIN)/python -m benchmarks.campaign --duration $(DURATION) --out $(OUT) $(if $(SEED),--seed $(SEED))

# The documentation site (mkdocs.yml) into site/; --strict: a broken link
# between pages fails the build (tests/unit/test_docs.py builds it too).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(UV_HOME) .vakit bench-out campaign-out site $(TS)/node_modules $(TS)/dist
