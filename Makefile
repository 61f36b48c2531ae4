# nel: the two commands a fresh machine needs are `make run` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHARED ?= $(abspath ../shared)
WHEELS := $(wildcard $(SHARED)/wheels/*.whl)
export NEL_DATA_DIR ?= $(if $(wildcard $(SHARED)/datasets),$(SHARED)/datasets,)
export NEL_MODEL_PATH ?= $(if $(wildcard $(SHARED)/models/stories260K.gguf),$(SHARED)/models/stories260K.gguf,)

# pytest-xdist workers for `make test` (0 = one process). Groups and longest-first order:
# tests/conftest.py (keep --no-loadscope-reorder, or xdist re-sorts modules by test count).
TEST_WORKERS ?= 2
PYTEST_XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)
# A test that fails in `make test` is run once more (3 s later) before the run fails: CI runs on
# shared, loaded machines where a real engine (Docker, Ray, SLURM) now and then stalls. A test
# that passed only the second time is listed as RERUN in the summary: a bug to find, not noise.
PYTEST_RERUNS ?= 1
# Install once: a stamp is older than pyproject.toml only when the dependencies may have
# changed (a fresh clone has no .venv, hence no stamp, and installs). `make run` installs only
# what the main job needs (nel and llama.cpp's server, `.[llama]`); `make test` everything
# (`.[all]`: Docker/K8s/Postgres/AWS/Ray integrations, the test tools, the docs site).
STAMP := $(VENV)/.nel-installed
# `import nemo_evaluator` with no extra lines (benchmarks/nel_nemo_evaluator.pth): a wheel of
# nel installs the .pth itself (setup.py); an editable install does not, so it is copied here.
NEMO_PATHS = $(BIN)/python -c "import shutil, sysconfig; shutil.copyfile('benchmarks/nel_nemo_evaluator.pth', sysconfig.get_paths()['purelib'] + '/nel_nemo_evaluator.pth')"
STAMP_ALL := $(VENV)/.nel-installed-all
# pip shows each package it collects and a progress bar per download (no -q: an install of
# several minutes must not look hung).
PIP_INSTALL = $(BIN)/pip install --progress-bar on $(if $(WHEELS),--find-links $(SHARED)/wheels,)
# The real NeMo Evaluator 0.3.0, in its own Python 3.12 venv: the compatibility tests run
# the same invocations through both tools (pyenv's shim needs the version named).
PEER_VENV ?= .venv-peers/nemo-evaluator
# The real NeMo Gym, for its agent and ng_collect_rollouts against `nel serve` (tests
# symlink its per-server venvs to this one, so Gym installs nothing at run time).
PEER_GYM_VENV ?= .venv-peers/nemo-gym
PY312 ?= env PYENV_VERSION=3.12.1 python3.12
# Harbor, whose agents (terminus-2, ...) the `harbor` solver runs: Python >= 3.12. 0.24.0:
# 0.25.0 needs a certifi newer than any the package index serves.
PEER_HARBOR_VENV ?= .venv-peers/harbor
# Inspect AI, whose `read_eval_log` reads back the logs of nel's `inspect` exporter.
PEER_INSPECT_VENV ?= .venv-peers/inspect-ai
# every-eval-ever, whose schema and validator check nel's `every_eval_ever` exporter.
PEER_EEE_VENV ?= .venv-peers/every-eval-ever
# The OpenClaw CLI agent with its own Node, from npm (deploy/agents/install_openclaw.sh).
OPENCLAW_LINK ?= .venv-peers/openclaw

.PHONY: setup setup-all system-deps peers bytecode run test test-fast lint bench docs docs-build clean

$(BIN)/python:
	@echo "==> [1/2] creating the virtualenv $(VENV) and upgrading pip"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --progress-bar on --upgrade pip

# Python packages (llama-cpp-python from the prebuilt wheel when ../shared has one,
# else built from source by pip: 3-10 minutes, which pip's "Building wheel" line shows).
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "==> [2/2] installing nel and llama.cpp's server for the main job: pip install -e '.[llama]'"
	$(PIP_INSTALL) -e '.[llama]'
	$(NEMO_PATHS)
	@touch $@
	@echo "==> installed the main job's packages ($(VENV)); \`make test\` adds the test extras"

# Everything the tests use; it includes the main job's packages, so it stamps both.
$(STAMP_ALL): pyproject.toml | $(BIN)/python
	@echo "==> [2/2] installing nel with every extra for the tests: pip install -e '.[all]'"
	$(PIP_INSTALL) -e '.[all]'
	$(NEMO_PATHS)
	@touch $@ $(STAMP)
	@echo "==> installed nel[all] ($(VENV))"

setup: $(STAMP)

setup-all: $(STAMP_ALL)

# Built once per machine under PEER_HOME and linked here (deploy/peers/install_peer.sh; a
# second call only checks the venv's stamp, so a new pin here gets a new venv).
peers:
	PY312='$(PY312)' bash deploy/peers/install_peer.sh nemo-evaluator-0.3.0-stats \
	  'nemo-evaluator[stats]==0.3.0' $(PEER_VENV)  # [stats]: scipy, else its compare is always INCONCLUSIVE
	PY312='$(PY312)' bash deploy/peers/install_peer.sh nemo-gym-0.4.0 'nemo-gym==0.4.0' $(PEER_GYM_VENV)
	PY312='$(PY312)' bash deploy/peers/install_peer.sh harbor-0.24.0 'harbor==0.24.0' $(PEER_HARBOR_VENV)
	PY312='$(PY312)' bash deploy/peers/install_peer.sh inspect-ai-0.3.285 'inspect-ai==0.3.285' $(PEER_INSPECT_VENV)
	PY312='$(PY312)' bash deploy/peers/install_peer.sh every-eval-ever-0.3.0 'every-eval-ever==0.3.0' $(PEER_EEE_VENV)
	bash deploy/agents/install_openclaw.sh $(OPENCLAW_LINK)  # the `openclaw` solver's CLI (npm: Node 24 + OpenClaw)

system-deps:
	bash deploy/install_system_deps.sh

# nel's own modules compiled once: where PYTHONDONTWRITEBYTECODE is set (CI images set it),
# every `nel` process would otherwise compile ~100 modules from source (about 0.3 s each
# start). compileall only rewrites what changed.
bytecode: | $(BIN)/python
	$(BIN)/python -m compileall -q -j 0 benchmarks nel_assets nel_resources dagster_project

# The main job on the embedded default: nel starts llama.cpp with the tiny model and
# evaluates 100 GSM8K problems (picked with shuffle_seed 42, as NeMo Evaluator picks them);
# results land in ./eval_results. The data and model locations used are recorded with
# `nel config`, so `nel validate` and `dagster dev` run later from a plain shell use them too.
run: setup bytecode
	$(if $(NEL_DATA_DIR),@$(BIN)/nel config set data_dir '$(NEL_DATA_DIR)',)
	$(if $(NEL_MODEL_PATH),@$(BIN)/nel config set model_path '$(NEL_MODEL_PATH)',)
	$(if $(NEL_DATA_DIR),,NEL_ALLOW_DOWNLOADS=1 )$(BIN)/nel eval run $(if $(CONFIG),$(CONFIG),dagster_project/configs/default.yaml)

test: setup-all system-deps peers bytecode
	$(BIN)/ruff check .
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_XDIST) --durations=15 \
		$(if $(filter 0,$(PYTEST_RERUNS)),,--reruns $(PYTEST_RERUNS) --reruns-delay 3 -rR) $(PYTEST_ARGS)

test-fast: setup-all bytecode
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_XDIST) -m "not slow" $(PYTEST_ARGS)

lint:
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python bench/bench_eval_throughput.py

# The documentation site: the generated reference pages rewritten from the code, then served
# with live reload on http://127.0.0.1:8000 (docs-build: the strict build CI's test makes).
docs: setup
	@test -x $(BIN)/mkdocs || $(PIP_INSTALL) -e '.[docs]'
	$(BIN)/python docs/gen_reference.py
	$(BIN)/mkdocs serve -a 127.0.0.1:8000

docs-build: setup
	@test -x $(BIN)/mkdocs || $(PIP_INSTALL) -e '.[docs]'
	$(BIN)/python docs/gen_reference.py
	$(BIN)/mkdocs build --strict

clean:
	rm -rf eval_results .pytest_cache
