# hybridgpu — every set-up step lives here; nothing is installed by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CACHE_DIR ?= $(HOME)/.cache/hybridgpu
export HYBRIDGPU_CACHE_DIR := $(CACHE_DIR)

.PHONY: all venv install run test lint typecheck contracts unit crds check-crds dashboards clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

venv install: $(STAMP)

## make run: the main job on its built-in default (the bundled simulation scenario)
run: $(STAMP)
	$(BIN)/hybridgpu simulate

## make crds: regenerate crds/ from the models and copy them into the chart
crds: $(STAMP)
	$(BIN)/hybridgpu crds --output crds/ --reference docs/crd-reference.md
	cp crds/*.yaml helm/hybridgpu-operator/crds/

## make dashboards: regenerate the chart's Grafana dashboards and PrometheusRule from
## operator/hybridgpu/dashboards/ (the chart tests fail when the checked-in files drift)
dashboards: $(STAMP)
	$(BIN)/python -m hybridgpu.dashboards .

lint: $(STAMP)
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Fragments for the real components (control plane, Prometheus, helm/kubectl) live in hack/*.mk.
-include hack/*.mk

## make test: install and start every real component the tests need, then run every tier
test: $(STAMP) lint typecheck contracts $(TEST_PREREQS)
	$(BIN)/pytest -q tests

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache .hypothesis
