# kubeslurm: `make demo` shows it working, `make test` runs every test tier.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest
export KUBESLURM_CACHE ?= $(HOME)/.cache/kubeslurm

.PHONY: venv test test-unit test-slurm test-k8s crds docs bench demo

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

## every tier that exists; the slow tiers skip nothing silently: they fail if they cannot run
test: test-unit test-slurm test-k8s

## tier 1: models, CRDs, renderers (seconds)
test-unit: venv
	$(PYTEST) -q tests/unit

## tier 2: rendered configs run by real Slurm daemons in network namespaces (root)
test-slurm: venv
	$(PYTEST) -m slurm tests/slurm

## tier 3: the operator against real etcd + kube-apiserver + kube-controller-manager
test-k8s: venv
	$(PYTEST) -m k8s tests/k8s

## regenerate crds/ from the models (a unit test fails when they drift)
crds: venv
	$(PY) -m kubeslurm.cli crds --output-dir crds
	$(PY) -m kubeslurm.cli api-reference --output docs/api.md

## docs/api.md is regenerated with the CRDs
docs: crds

## speed targets: rendering 1000 nodes / 8000 GPUs
bench: venv
	$(PY) benchmarks/render_bench.py

demo:
	@echo "make demo arrives with the local Kubernetes cluster (issue 4/5)."
	@echo "Until then: make venv && .venv/bin/kubeslurm render -f examples/research.yaml"
	@$(MAKE) -s venv && $(VENV)/bin/kubeslurm render -f examples/research.yaml
