# reclaim: the developer's front door. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# terraform checks: checkov pins packaging<24 and its own hcl2 fork, so it gets its own
# venv; the provider wheels carry the schemas the offline check reads (pinned here and
# in tests/terraform/schema_extract.py WHEELS; a test keeps the two lists equal).
TF_VENV := .venv-tf
TF_STAMP := $(TF_VENV)/.installed
TF_CACHE := .cache/tf
TF_WHEELS := \
	$(TF_CACHE)/cdktf_cdktf_provider_google-16.12.1-py3-none-any.whl \
	$(TF_CACHE)/cdktf_cdktf_provider_google_beta-16.12.1-py3-none-any.whl \
	$(TF_CACHE)/cdktf_cdktf_provider_time-11.0.1-py3-none-any.whl
TF_VARS ?= terraform.tfvars
# pip at -qq: errors only. At -q every install repeats this machine's index warnings (a
# hundred lines that would bury make bench's table); a failed install still says why.
PIP_QUIET := --quiet --quiet

.PHONY: help venv wheel browser test unit lint fmt dev demo demo-pools demo-waits bench bench-scale soak mutate tf-venv tf-schema tf-check deploy destroy clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml setup.py client/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_QUIET) --upgrade pip
	$(PY) -m pip install $(PIP_QUIET) -r requirements-dev.txt
	$(PY) -m pip install $(PIP_QUIET) --no-deps -e .
	$(PY) -m pip install $(PIP_QUIET) --no-deps -e client  # the Python client (its tests: tests/client)
	touch $(STAMP)

venv: $(STAMP) ## Create .venv with the pinned packages

# The one wheel (docs/library.md): the library, the CLI, the local cloud and the terraform
# module; its version is reclaim/VERSION. pip builds it in an isolated environment (with
# the pinned setuptools of pyproject.toml), so no venv is needed; build/ is its scratch.
DIST ?= dist
wheel: ## Build the reclaim wheel into dist/ (pip install it in your project's venv)
	rm -rf build
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir $(DIST) .
	rm -rf build

# The browser tests drive Debian's chromium through chromium-driver (tests/browser). As
# root with apt-get (CI) they are installed once; elsewhere the tests say why they skip.
browser: ## Install headless Chromium and its driver for the browser tests (as root, apt-get)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver (tests/browser)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
		echo "chromium or chromedriver is missing and cannot be installed here (needs root and apt-get): tests/browser will be skipped (and fail under CI=true)"; \
	fi

# The suite waits on emulators, function processes and sweeps more than it computes:
# TEST_WORKERS pytest-xdist workers (each with its own emulators) overlap the waits;
# TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 6

test: venv $(TF_STAMP) $(TF_WHEELS) browser ## Lint, then the whole test suite in parallel (starts its own emulators)
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -n $(TEST_WORKERS)

unit: venv ## The fast suite: pure logic on the in-memory store, no services (tests/unit)
	$(PY) -m pytest tests/unit -q

lint: venv ## ruff, mypy and the import contracts (import-linter, pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

fmt: venv ## Format the code with ruff
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

dev: venv ## Run the local cloud in the foreground (Ctrl-C stops it)
	$(PY) -m reclaim.local.dev

demo: venv ## The incident replay: 22 jobs, one instance killed mid-batch
	$(PY) -m reclaim.local.demo

demo-pools: venv ## Two worker pools side by side: quick jobs never wait behind heavy ones
	$(PY) -m reclaim.local.demo_pools

demo-waits: venv ## A render waits for an external farm's callback, then fans its frames out to a GPU pool (docs/waiting.md)
	$(PY) -m reclaim.local.demo_waits

bench: venv ## Benchmarks: writes bench/results.json and bench/results.md
	$(PY) -m bench

bench-scale: venv ## The long benchmarks (10,000 jobs queued at once on 4 record shards, the drain off, a 10,000-child fan-out; about an hour), into the same table
	$(PY) -m bench --only big_backlog,drain_off,waits_scale

# The flow-control soak (issue 46): the rounds of tests/chaos/test_flow_kills.py (a key's
# holder killed hard, the next reclaimed gracefully, the next paused past the stale time)
# on fresh local clouds, until every ordering of the rescue, a take-over, the hand-back's
# release and the drain's re-claim that can happen was seen, or SOAK_MINUTES are up; it
# prints the orderings covered and the overlaps found (exit 1 on any).
SOAK_MINUTES ?= 30
SOAK_ROUNDS ?= 6
soak: venv ## Kills, hand-backs and zombies on one max_running=1 key until every ordering was seen (SOAK_MINUTES=30)
	$(PY) -m tests.chaos.flow_kills --minutes $(SOAK_MINUTES) --rounds $(SOAK_ROUNDS)

MUTATE_STAMP := $(VENV)/.mutate-installed
$(MUTATE_STAMP): requirements-mutate.txt $(STAMP)
	$(PY) -m pip install $(PIP_QUIET) -r requirements-mutate.txt
	touch $(MUTATE_STAMP)

# mutmut's settings (modules, tests per mutant) are in pyproject.toml [tool.mutmut].
mutate: venv $(MUTATE_STAMP) ## Mutation testing of the core with mutmut (MODULE=job_queue: one module)
	$(VENV)/bin/mutmut run $(if $(MODULE),"shared.$(MODULE).*")
	$(VENV)/bin/mutmut results

# --- terraform: offline checks (no terraform binary needed) and deploy -----------------

$(TF_STAMP): requirements-tf.txt
	test -x $(TF_VENV)/bin/python || $(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip install $(PIP_QUIET) --upgrade pip
	$(TF_VENV)/bin/python -m pip install $(PIP_QUIET) -r requirements-tf.txt
	touch $(TF_STAMP)

# cdktf_cdktf_provider_<name>-<version>-py3-none-any.whl -> cdktf-cdktf-provider-<name>==<version>
$(TF_CACHE)/cdktf_cdktf_provider_%-py3-none-any.whl: | $(STAMP)
	mkdir -p $(TF_CACHE)
	$(PY) -m pip download --quiet --no-deps --dest $(TF_CACHE) \
		"cdktf-cdktf-provider-$(subst _,-,$(firstword $(subst -, ,$*)))==$(lastword $(subst -, ,$*))"

tf-venv: $(TF_STAMP) ## Create .venv-tf with checkov (requirements-tf.txt)

tf-schema: venv $(TF_WHEELS) ## Regenerate the vendored provider schema extracts from the wheels
	$(PY) tests/terraform/schema_extract.py $(addprefix --wheel ,$(TF_WHEELS))

tf-check: venv $(TF_STAMP) $(TF_WHEELS) ## Offline terraform checks: provider schema, checkov, hcl2, packaging
	$(PY) -m pytest tests/terraform -q

# deploy/ is this repository's root module: it calls the module in terraform/.
deploy: ## terraform init + apply in deploy/ with deploy/terraform.tfvars (see terraform/README.md)
	@command -v terraform >/dev/null || { echo "terraform is not installed (see terraform/README.md)"; exit 1; }
	@test -f deploy/$(TF_VARS) || { echo "deploy/$(TF_VARS) missing: cp deploy/terraform.tfvars.example deploy/$(TF_VARS) and edit it"; exit 1; }
	cd deploy && terraform init -input=false && terraform apply -var-file=$(TF_VARS)

destroy: ## terraform destroy of what deploy created
	@command -v terraform >/dev/null || { echo "terraform is not installed (see terraform/README.md)"; exit 1; }
	cd deploy && terraform destroy -var-file=$(TF_VARS)

clean: ## Remove the venv and caches
	rm -rf $(VENV) $(TF_VENV) .cache/tf .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants build dist
