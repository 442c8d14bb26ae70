# Two commands on a fresh machine:  `make demo`  and  `make test`  (see README.md).
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
# The CPU build of torch (a wheel on the dev and CI machines' disk). On a GPU machine, install a
# CUDA build of torch into the venv first (or set TORCH_SPEC) and this step keeps it.
TORCH_SPEC ?= torch==2.13.0
TARGET ?= $(shell test -e /dev/nvidiactl && echo cuda || echo cpu)
# pytest-xdist workers of `make test` (a file each: its module fixtures are built once). Four on two
# cores were slower (24 min 54 s against 20-21 min) and failed two load-sensitive tests.
TEST_WORKERS ?= 3
#: The repository's packages (pyproject.toml's [tool.setuptools.packages.find]).
PACKAGES := problems harness agent store worker api cli config display vocabulary migrations

.PHONY: setup demo test test-host test-types test-suite test-examples test-gpu clean

# pip byte-compiles what it installs one file at a time (~20 s of the install on two cores);
# compileall does the same on every core in ~4 s. Sandboxes see the venv read-only, so what they
# import must be compiled here (some of torch's test files are not Python 3.11: errors ignored).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q --no-compile "$(TORCH_SPEC)"
	$(PY) -m pip install -q --no-compile -e ".[service,test]"
	$(PY) -m compileall -qq -j0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
	touch $@

setup: $(VENV)/.installed

## The main job on the embedded default: the offline scripted LLM optimises seed problem 1, every
## attempt judged by the sandboxed referee and stored in SQLite.
demo: setup
	$(VENV)/bin/kernelloop optimize level2/conv_tanh_scale_bias_maxpool --llm scripted --target $(TARGET)

## What the tests need of the host besides the venv: PostgreSQL and Redis running, a headless
## browser and a Compose implementation (installed from apt where missing).
test-host:
	scripts/ensure-services
	scripts/ensure-browser
	scripts/ensure-compose || echo "no Compose implementation: the compose file check will be skipped"

## Unit, integration (real PostgreSQL and Redis) and CPU end-to-end tests; GPU tests are deselected.
## The host is prepared while the venv installs (on a fresh 2-core machine: 18 s of apt beside 50 s of
## pip), and mypy (one core, ~30 s on a fresh clone) runs while pytest starts its workers.
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target setup test-host
	$(VENV)/bin/ruff check .
	$(MAKE) --no-print-directory -j2 test-types test-suite

test-types: setup
	$(VENV)/bin/mypy

# With PYTHONDONTWRITEBYTECODE set (as on the development and CI machines), every process of the
# suite (CLI commands, servers, sandboxes) compiled the repository's modules from source again and
# each pytest worker rewrote the tests' asserts again: compiled once here instead.
test-suite: setup
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m compileall -qq -j0 $(PACKAGES) tests benchmarks
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -m "not gpu and not examples" -q -n $(TEST_WORKERS) --dist loadfile --durations=20

## Every bundled level-1 example's CPU kernel through the referee (`make test` runs two of them),
## and the admission of every bundled problem (`make test` admits seven).
test-examples: setup
	$(PY) -m pytest -m examples -q tests/examples tests/problems/test_admission.py

## On a GPU machine: the harness's GPU tests (torch + pytest only), one file after another: timing
## tests that share the GPU with each other (pytest-xdist) measure each other's kernels.
test-gpu:
	$(PYTHON) -m pytest -m gpu -q tests/gpu


clean:
	rm -rf $(VENV) .pytest_cache
