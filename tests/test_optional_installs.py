"""The optional installs of `make test` (the Makefile's `optional` macro): one that failed left
optional-NAME.failed and shows up here as a skip with the installer's reason; one that succeeded
must really work, since the tests that need it skip (importorskip) rather than fail without it."""
import pathlib
import subprocess
import sys

import pytest

VENV = pathlib.Path(sys.prefix)
NAMES = sorted(p.name[len("optional-"):-len(".log")] for p in VENV.glob("optional-*.log"))

# what each optional install provides: the modules its tests import
MODULES = {
    "torch": ["torch"],
    "hpc": ["dask_jobqueue", "dask_mpi", "mpi4py.MPI"],
    "tls": ["cryptography"],
    "gpu": ["cupy"],  # imports without a GPU; the gpu-marked tests check for a device themselves
    "dask-glm": ["dask_glm"],
    "jax": ["jax", "jaxlib"],
}


def _failure_reason(name):
    failed = VENV / f"optional-{name}.failed"
    if not failed.exists():
        return None
    lines = [ln for ln in failed.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


@pytest.mark.skipif(not NAMES, reason="not a `make test` virtual environment: no optional install was tried")
@pytest.mark.parametrize("name", NAMES or ["none"])
def test_an_optional_install_that_did_not_fail_provides_what_its_tests_use(name):
    reason = _failure_reason(name)
    if reason is not None:
        pytest.skip(f"optional install '{name}' failed, its tests skip: {reason}")
    if name == "slurm":  # Debian packages, not Python modules (cluster/slurm/local_slurm.py)
        sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "cluster" / "slurm"))
        try:
            import local_slurm
        finally:
            sys.path.pop(0)
        assert local_slurm.missing() == []
        return
    assert name in MODULES, f"optional install '{name}' has no entry in MODULES: say what it provides"
    for module in MODULES[name]:
        # a fresh interpreter: mpi4py.MPI initialises MPI, which must not happen in the test process
        out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"'{name}' installed without error, but import {module} fails: {out.stderr[-800:]}"
