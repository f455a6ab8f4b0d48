# Thin wrappers that the README and CI both call. Each target creates the virtual
# environment it needs (PYTHON must be 3.11+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# make test's pytest processes: most of its time is spent waiting on PostgreSQL, reaper
# processes and clusters, so three share two cores well. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3

.PHONY: demo demo-server docs docs-reference test lint unit bench clean check-deploy deploy-generate

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# One stamp per set of extras, redone when pyproject.toml changes.
$(VENV)/.demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[embedded]'
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.demo

## demo: seed the testnet audit's garbage into an embedded PostgreSQL (or $$REAPER_DSN) and sweep it
demo: $(VENV)/.demo
	$(BIN)/python -m reaper.dev.demo

## demo-server: keep the demo's PostgreSQL up (re-seeded) for reaper status/run; Ctrl-C stops it
demo-server: $(VENV)/.demo
	$(BIN)/python -m reaper.dev.demo --serve

## docs: build the documentation site into site/ (mkdocs build --strict: a broken link fails)
docs: $(VENV)/.test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## docs-reference: rewrite the settings, metrics and commands references in docs/ from the code
docs-reference: $(VENV)/.test
	$(BIN)/python docs/hooks.py

## lint: ruff (lint and format) and mypy
lint: $(VENV)/.test
	$(BIN)/ruff check $(wildcard reaper tests bench deploy docs)
	$(BIN)/ruff format --check $(wildcard reaper tests bench deploy docs)
	$(BIN)/mypy

## test: lint, the docs site, then every test (unit, db, process) against a real PostgreSQL ($$REAPER_TEST_DSN, Docker, or embedded)
test: lint docs
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## unit: tests/unit alone: no PostgreSQL, no subprocess, no network (seconds)
unit: $(VENV)/.test
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

## bench: the benchmarks; prints Markdown tables (BENCH_ARGS=--help for the options)
bench: $(VENV)/.test
	$(BIN)/python -m bench $(BENCH_ARGS)

## check-deploy: print the systemd-analyze security exposure of reaper.service (fails above 2.0)
check-deploy:
	systemd-analyze security --offline=true --threshold=20 deploy/systemd/reaper.service

## deploy-generate: rewrite the dashboard, the ConfigMaps and PrometheusRule from their sources, and the alerts' runbook links (RUNBOOK_BASE=URL: the docs site's address; default: mkdocs.yml's site_url)
deploy-generate: $(BIN)/python
	$(BIN)/python deploy/grafana/build.py
	$(BIN)/python deploy/generate.py $(if $(RUNBOOK_BASE),--runbook-base '$(RUNBOOK_BASE)')

clean:
	rm -rf $(VENV) .demo-pg site build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
