# Two entry points for a fresh machine: `make run` and `make test`.
# Both install what is missing (OS packages included) before they start.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PG_BIN := /usr/lib/postgresql/15/bin
ZK_JAR := /usr/share/java/zookeeper.jar

.PHONY: run test setup os-deps lint typecheck unit integration faults bench clean

setup: os-deps $(STAMP)

# PostgreSQL 15 and Java come with the machine; ZooKeeper and promtool (which
# checks ops/prometheus in the tests) do not.
os-deps:
	@if [ ! -x $(PG_BIN)/initdb ] || [ ! -f $(ZK_JAR) ] || ! command -v java >/dev/null \
	    || ! command -v promtool >/dev/null; then \
	  echo "installing OS packages (postgresql-15, zookeeper, java, promtool)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends postgresql-15 zookeeper default-jre-headless prometheus >/dev/null; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: setup
	$(BIN)/vakit up --demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest -q tests/unit

test: setup lint
	$(BIN)/pytest -q -p no:cacheprovider tests

bench: setup
	$(BIN)/python -m benchmarks.wave

clean:
	rm -rf $(VENV) .vakit bench-out
