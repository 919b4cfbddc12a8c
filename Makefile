# kubeslurm: `make demo` shows it working, `make test` runs every test tier.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest
export KUBESLURM_CACHE ?= $(HOME)/.cache/kubeslurm

.PHONY: venv test test-lane-cluster test-lane-apiserver test-unit test-slurm test-k8s test-helm test-images images load-images crds docs bench bench-render bench-cluster bench-scale demo demo-down

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cluster]'
	touch $@

## every tier that exists; the slow tiers skip nothing silently: they fail if they cannot run.
## After the unit tier, three lanes side by side, each its tiers one after another: the local
## cluster's (images, cluster, e2e), the API server's (k8s, helm) and real Slurm's. They share
## nothing but the machine; each tier's output is printed whole when it ends (--output-sync).
test: test-unit
	$(MAKE) --no-print-directory -k -j3 --output-sync=target test-lane-cluster test-lane-apiserver test-slurm

test-lane-cluster: venv cluster-deps
	$(MAKE) --no-print-directory test-images
	$(MAKE) --no-print-directory test-cluster
	$(MAKE) --no-print-directory test-e2e

test-lane-apiserver: venv
	$(MAKE) --no-print-directory test-k8s
	$(MAKE) --no-print-directory test-helm

## tier 1: models, CRDs, renderers (seconds)
test-unit: venv
	$(PYTEST) -q tests/unit

## tier 2: rendered configs run by real Slurm daemons in network namespaces (root)
test-slurm: venv
	$(PYTEST) -m slurm tests/slurm

## tier 3: the operator against real etcd + kube-apiserver + kube-controller-manager
test-k8s: venv
	$(PYTEST) -m k8s tests/k8s

## tier 4: the local Kubernetes cluster (root): pods, fake GPUs, Service DNS, PVCs, StatefulSets.
## Uses a cluster that `make cluster-up` started (and leaves it); otherwise starts one and tears it down.
test-cluster: venv cluster-deps
	$(PYTEST) -m cluster tests/cluster

## tier 6: the user story end to end (operator in-cluster via helm, jobs, scale, failover, replacement).
## The fault tier (tier 7, make test-faults) is not part of make test until it passes whole: in its
## first whole run a node (cpu-1) did not come back usable after a fault and four tests could not start.
test-e2e: venv cluster-deps
	$(PYTEST) -m e2e tests/e2e

## tier 7 alone: the fault matrix (tests/faults): one fault per test under a stream of jobs, none lost
test-faults: venv cluster-deps
	$(PYTEST) -m faults tests/faults

## item 9 of the fault matrix: mixed jobs under a random fault every few minutes; prints the ledger
## summary. SOAK_MINUTES=120 make soak for longer; SOAK_FAULT_EVERY (s), SOAK_SEED repeat a run.
SOAK_MINUTES ?= 30
SOAK_FAULT_EVERY ?= 240
soak: venv cluster-deps
	KUBESLURM_SOAK_MINUTES=$(SOAK_MINUTES) KUBESLURM_SOAK_FAULT_EVERY=$(SOAK_FAULT_EVERY) \
	  $(if $(SOAK_SEED),KUBESLURM_SOAK_SEED=$(SOAK_SEED)) $(PYTEST) -m soak -s tests/faults/test_soak.py

.PHONY: test-cluster test-e2e test-faults soak cluster-up cluster-down cluster-status cluster-deps
## a local Kubernetes cluster on this machine (root); prints the kubeconfig path. Idempotent.
cluster-up: venv cluster-deps
	$(PY) -m testbed.local_cluster up

## stop it: no process, mount, namespace, bridge or iptables rule of it stays
cluster-down: venv
	$(PY) -m testbed.local_cluster down

## kubeconfig path, daemons with their memory, nodes and pods
cluster-status: venv
	$(PY) -m testbed.local_cluster status

## the Debian packages the local cluster runs (containerd, runc, CNI plugins, ...)
cluster-deps:
	bash testbed/local_cluster/install-deps.sh

## the helm charts: lint, render, bad values refused, install/upgrade/uninstall against the tier-3 API server
test-helm: venv
	$(PYTEST) -m helm tests/helm

## container images without Docker: docker-archive tars in $(KUBESLURM_CACHE)/images (root; cached by content)
images:
	$(PYTHON) images/build.py

## import the image tars into containerd (CONTAINERD_ADDRESS=/run/containerd/containerd.sock by default)
load-images: images
	bash images/load.sh $(if $(CONTAINERD_ADDRESS),--address $(CONTAINERD_ADDRESS))

## the images: structure, no secrets, Slurm/MariaDB/operator run from them in a chroot, containerd import + run (root)
test-images: venv
	$(PYTEST) -m images tests/images

## regenerate crds/ from the models (a unit test fails when they drift), and the charts' copies
crds: venv
	$(PY) -m kubeslurm.cli crds --output-dir crds
	$(PY) charts/sync_from_crds.py
	$(PY) -m kubeslurm.cli api-reference --output docs/api.md

## docs/api.md is regenerated with the CRDs
docs: crds

## speed figures, every part even when one misses its target, as ONE table (figure, target, kubeslurm,
## reference, ratio, met); fails only when a part could not be measured (root; takes the machine's locks)
bench: venv cluster-deps
	$(PY) benchmarks/run_all.py --jobs $(BENCH_JOBS) --scale-nodes $(BENCH_SCALE_NODES)

bench-render: venv
	$(PY) benchmarks/render_bench.py

## apply->idle, scale-up latency, job throughput (BENCH_JOBS) vs. native Slurm, operator CPU/memory (root)
BENCH_JOBS ?= 200
bench-cluster: venv cluster-deps
	$(PY) benchmarks/cluster_bench.py --jobs $(BENCH_JOBS)

## the operator at 1000 slurmd pods (BENCH_SCALE_NODES=5000 for more) faked by kwok on a real API server,
## a real slurmctld holding as many node records: reads/writes/time of a no-op reconcile, memory,
## scale-up and scale-down vs. a bare StatefulSet, Slurm commands per reconcile (root, Go)
BENCH_SCALE_NODES ?= 1000
bench-scale: venv
	$(PY) benchmarks/scale_bench.py --nodes $(BENCH_SCALE_NODES)

## the whole user story: cluster (yours via KUBECONFIG, else the local one), images, operator,
## examples/demo.yaml, jobs as alice in the login pod; prints timings and what to try next
demo: venv
	$(PY) -m testbed.demo up

## remove what `make demo` made: the SlurmCluster, the operator, and the local cluster if demo started it
demo-down: venv
	$(PY) -m testbed.demo down
