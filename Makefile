# Two commands: `make run` serves the webhook, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BIND ?= 127.0.0.1:8443
CONFIG ?=

.PHONY: install run test test-unit certs kube-assets tools manifests chart-lint image demo clean

install: $(VENV)/.installed

# The modules setup.py compiles with mypyc are built next to their sources (an editable
# install): a change to one of them builds them again.
COMPILED_SOURCES := $(shell $(PYTHON) -c 'import runpy; print(*runpy.run_path("setup.py", run_name="list")["COMPILED"])')

$(VENV)/.installed: pyproject.toml setup.py $(COMPILED_SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	hack/compiler.sh $(BIN)/python
	rm -f webhook_core__mypyc*.so && find webhook -name '*.so' -delete  # none left from before
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# What serving needs alone, interpreted (no compiler, no test packages): a fresh clone serves in
# seconds. `make run` takes the compiled build instead once `make install` (or `make test`) made it.
$(VENV)/.serving: pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet 'setuptools>=68' wheel  # the build's own, in place of an isolated
	MTHREADS_PURE_PYTHON=1 $(BIN)/pip install --quiet --no-build-isolation -e .  # one with mypy
	touch $@

SERVING := $(if $(wildcard $(VENV)/.installed),install,$(VENV)/.serving)

certs: certs/tls.crt

certs/tls.crt: | $(SERVING)
	$(BIN)/mthreads-webhook certs --out certs

run: $(SERVING) certs
	$(BIN)/mthreads-webhook serve --bind $(BIND) --cert-file certs/tls.crt --key-file certs/tls.key \
		$(if $(CONFIG),--config $(CONFIG))

# kube-apiserver, kube-scheduler and etcd for the cluster tests, and the node's kubelet,
# kube-controller-manager and kube-proxy (built once, cached).
kube-assets:
	hack/kube-assets.sh

# helm and kubectl for the tests and the targets below (pinned, cached; never PATH's).
tools: install
	PYTHON=$(BIN)/python hack/tools.sh

# The plain manifests under manifests/ (base, overlays, cert-manager, extender) are rendered
# from the chart manifests/hami; run after changing the chart (tests fail when they are stale).
manifests: tools
	$(BIN)/python hack/render_manifests.py

chart-lint: tools
	"$$(PYTHON=$(BIN)/python hack/tools.sh | tail -n1)/helm" lint --strict manifests/hami

# hack/node-assets.sh runs hack/kube-assets.sh and adds what tests/node's real node needs
# (containerd, runc, CNI plugins, iptables; the pause and kube-scheduler images): docs/node-tests.md.
test: install tools
	hack/node-assets.sh >/dev/null
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The pure tests only: no API server and no process of any kind (see the markers in pyproject.toml).
test-unit: install tools
	$(BIN)/python -m pytest -m "not cluster and not process and not image" $(PYTEST_ARGS)

# The container image from the Dockerfile (tagged mthreads-webhook:<version>, what the chart
# deploys), with its size; IMAGE_BASE=python:3.11-slim builds on a registry's base (hack/image.sh).
image:
	hack/image.sh >/dev/null

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis webhook_core__mypyc*.so
	find webhook -name '*.so' -delete
	find certs -mindepth 1 ! -name .gitkeep -delete

# Try it on a local API server: fake nodes, the webhook and the allocator, the examples placed, the cards shown.
demo: install
	hack/kube-assets.sh >/dev/null
	$(BIN)/python hack/demo.py $(DEMO_ARGS)

# Benchmarks, tables in docs/benchmarks.md: `make bench`, one part: `make bench BENCH=webhook`,
# options for bench/run.py: BENCH_ARGS='--rounds 3' (see `python -m bench.run --help`).
.PHONY: bench
$(VENV)/.bench-installed: pyproject.toml | install
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $@

bench: install $(VENV)/.bench-installed
	hack/kube-assets.sh >/dev/null
	$(BIN)/python -m bench.run $(if $(BENCH),--parts $(BENCH)) $(BENCH_ARGS)

# Long fuzzing and soak runs of tests/hardening (docs/reliability.md): tens of thousands of
# cases per property; `make fuzz FUZZ_ARGS='-x -k mutate'` to run some of them.
.PHONY: fuzz
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest tests/hardening -m "fuzz or soak" $(FUZZ_ARGS)
