# reclaim: the developer's front door. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv test lint fmt dev demo bench tf-check deploy destroy clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

venv: $(STAMP) ## Create .venv with the pinned packages

test: venv ## Run the whole test suite (starts its own emulators)
	$(PY) -m pytest

lint: venv ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: venv ## Format the code with ruff
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

dev: venv ## Run the local cloud in the foreground (Ctrl-C stops it)
	$(PY) -m local.cloud

demo: venv ## The incident replay: 22 jobs, one instance killed mid-batch
	$(PY) -m local.demo

bench: venv ## Benchmarks: writes bench/results.json and bench/results.md
	$(PY) -m bench

clean: ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
