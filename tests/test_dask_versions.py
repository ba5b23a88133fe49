"""The version policy of the dask pin: daskgrad uses private dask and distributed names (listed once, in
``daskgrad/_dask/internals.py``), so it supports only the releases that list was checked against
(``CHECKED`` there), and pyproject.toml's pin admits no release beyond the newest checked one's month."""
import pathlib
import re
import tomllib

import dask
import distributed
import pytest
from packaging.version import Version

from daskgrad._dask.internals import CHECKED

ROOT = pathlib.Path(__file__).parents[1]
INSTALLED = {"dask": dask.__version__, "distributed": distributed.__version__}
WHAT_TO_DO = ("check each private name in daskgrad/_dask/internals.py (and daskgrad/_dask/dashboard.py's "
              "imports) against that release, run the whole suite on it, then widen CHECKED there and the pin "
              "in pyproject.toml (CONTRIBUTING.md, 'Upgrading dask')")


def _pin(package):
    """The lower and upper bound of ``package`` in pyproject.toml's dependencies."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if re.match(rf"{package}(\[.*\])?[<>=]", d))
    return Version(re.search(r">=([\w.]+)", spec).group(1)), Version(re.search(r"<([\w.]+)", spec).group(1))


@pytest.mark.parametrize("package", sorted(CHECKED))
def test_the_installed_release_is_one_the_private_api_list_was_checked_against(package):
    oldest, newest = map(Version, CHECKED[package])
    installed = Version(INSTALLED[package])
    assert installed <= newest, (
        f"{package} {installed} is newer than the newest release daskgrad's private-API list was checked "
        f"against ({newest}): {WHAT_TO_DO}")
    assert installed >= oldest, (
        f"{package} {installed} is older than the oldest release daskgrad's private-API list was checked "
        f"against ({oldest}): install a checked one (pip install '{package}>={oldest},<={newest}')")


@pytest.mark.parametrize("package", sorted(CHECKED))
def test_the_pin_admits_only_the_checked_releases_and_their_patch_releases(package):
    lower, upper = _pin(package)
    oldest, newest = map(Version, CHECKED[package])
    assert lower == oldest, f"pyproject.toml pins {package}>={lower}, the oldest checked release is {oldest}"
    # dask's calendar versions: the pin's bound is at most the month after the newest checked release
    month = Version(f"{newest.major + 1}.1" if newest.minor == 12 else f"{newest.major}.{newest.minor + 1}")
    assert newest < upper <= month, (
        f"pyproject.toml pins {package}<{upper}, the newest checked release is {newest}: the bound must be "
        f"at most {month} ({WHAT_TO_DO})")
