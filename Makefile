# openwop-operator — stable entry points. Every target works from a fresh clone.
SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/openwop/target
CARGO ?= cargo

.PHONY: ui ui-check screenshots all build test chart-check test-unit lint fmt fmt-check clippy crds crds-check bench demo cluster-up cluster-down kind-test kind-up kind-down

all: build

build:
	$(CARGO) build --workspace --bins

## test: everything CI runs — formatting, lints, generated files, all tests (unit, property, integration, e2e).
# The prerequisites run in order (no -j): the bins must exist before the cluster starts the
# node agent, and the chart's server-side dry-run needs the cluster.
test: fmt-check clippy crds-check ui-check build chart-check
	$(CARGO) test --workspace --no-fail-fast

## test-unit: the fast subset that needs no cluster (pure crates only).
test-unit:
	$(CARGO) test -p openwop-protocol -p openwop-providers -p kubectl-openwop

lint: fmt-check clippy

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## crds: regenerate the CRD manifests from the Rust types.
crds:
	$(CARGO) run -q -p openwop-crds --bin crdgen > crds/openwop.dev_crds.yaml

crds-check:
	@if [ -f crds/src/bin/crdgen.rs ]; then \
	  $(CARGO) run -q -p openwop-crds --bin crdgen | diff -u crds/openwop.dev_crds.yaml - \
	    || { echo "crds/openwop.dev_crds.yaml is stale: run 'make crds' and commit it" >&2; exit 1; }; \
	fi

## ui: rebuild the web UI's committed bundle (operator/ui/dist, embedded in the operator) from operator/ui/src
## with the front-end dependencies pinned in operator/ui/package-lock.json (Node 20 and npm; not needed to build
## the operator itself).
ui:
	cd operator/ui && npm ci --no-audit --no-fund --loglevel=error && node build.mjs

## ui-check: the committed bundle is what the sources build to.
ui-check:
	cd operator/ui && npm ci --no-audit --no-fund --loglevel=error && node build.mjs --check

## screenshots: regenerate docs/webui/*.png (the pictures of docs/web-ui.md) in headless Chromium on the mini-cluster.
screenshots: build
	bash e2e/cluster/cluster.sh up
	$(CARGO) test -p openwop-e2e --test webui -- --ignored --nocapture --test-threads=1 screenshots

## chart-check: helm lint, renders, value refusals, CRD copy in sync, server-side dry-run (needs the cluster).
chart-check:
	bash e2e/cluster/cluster.sh up
	eval "$$(bash e2e/cluster/cluster.sh env)" && bash charts/openwop/ci/check.sh

## bench: criterion benches (pipeline, redaction, worker publish + RSS), then 200 Runs vs 200 bare pods on the mini-cluster
## and the wake lateness of 20 durable 4 s delays (scale test delay_wake_lateness),
## then the REST API figures (JSON events of a 1,000-event run; 100 SSE followers of a live run; each beside a
## direct JetStream reader in the same run), with release builds of the operator and worker (what users run;
## OPENWOP_E2E_PROFILE=debug for the debug builds of the scale figures), then the restart figures (debug builds from
## `build`: operator SIGKILLed 5 times over 50 Runs; nats-server and kube-apiserver restarted mid-batch; worker pods
## force-deleted at 27 kill points), then the web UI's figures in headless Chromium (first paint and fully rendered
## timeline of a 1,000- and a 10,000-event run, JS heap, scroll frame times; the runs list with 5,000 Runs in the browser and GET /v1/runs over them). Each prints
## FIGURES lines.
bench: build
	$(CARGO) bench --workspace
	$(CARGO) test --release -p openwop-worker --test fault_bench -- --ignored --nocapture
	$(CARGO) build --release -p openwop-operator -p openwop-worker --bins
	bash e2e/cluster/cluster.sh up
	OPENWOP_E2E_PROFILE=release $(CARGO) test -p openwop-e2e --test scale -- --ignored --nocapture --test-threads=1
	$(CARGO) test --release -p openwop-operator --test cluster rest_figures -- --ignored --nocapture
	$(CARGO) test -p openwop-e2e --test journeys -- --ignored --nocapture --test-threads=1 restart_figures_operator_nats_and_apiserver worker_force_delete_figures
	$(CARGO) test --release -p openwop-operator --test runs_list -- --ignored --nocapture list_figures
	$(CARGO) test -p openwop-e2e --test webui -- --ignored --nocapture --test-threads=1 figures

cluster-up:
	@bash e2e/cluster/cluster.sh up

cluster-down:
	@bash e2e/cluster/cluster.sh down

demo:
	@bash e2e/demo.sh

## kind-test: the e2e journeys on a real kind cluster, built and run on this machine without a registry
## (dockerd started if needed, node image and images built here and cached in ~/.cache/openwop/kind);
## the cluster is deleted afterwards. See e2e/kind/README.md.
kind-test:
	OPENWOP_KIND_OFFLINE=1 bash e2e/kind/up.sh && bash e2e/kind/test.sh; rc=$$?; bash e2e/kind/down.sh; exit $$rc

## kind-up / kind-down: the same cluster kept for use (prints export KUBECONFIG=...).
kind-up:
	@OPENWOP_KIND_OFFLINE=1 bash e2e/kind/up.sh

kind-down:
	@bash e2e/kind/down.sh
