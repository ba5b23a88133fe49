"""Optional installs of `make test` that failed show up here as skips, with the installer's reason."""
import pathlib
import sys

import pytest

VENV = pathlib.Path(sys.prefix)
NAMES = sorted(p.name[len("optional-"):-len(".log")] for p in VENV.glob("optional-*.log"))


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_optional_install_succeeded(name):
    failed = VENV / f"optional-{name}.failed"
    if failed.exists():
        lines = [ln for ln in failed.read_text(errors="replace").splitlines() if ln.strip()]
        pytest.skip(f"optional install '{name}' failed, its tests skip: {lines[-1] if lines else 'no output'}")
