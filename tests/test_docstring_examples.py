"""Every example (``>>>``) in a docstring of the package runs, as the API reference shows it: after the
setup the reference prints (docs/api/examples_setup.py), a fresh copy of it for each docstring, in an
empty directory, on dask's synchronous scheduler; printed values are compared as doctest does."""
import doctest
import importlib
import pathlib
import pkgutil

import dask
import pytest

import daskgrad

ROOT = pathlib.Path(__file__).parents[1]
SETUP = ROOT / "docs" / "api" / "examples_setup.py"


def _modules():
    names = ["daskgrad"] + [m.name for m in pkgutil.walk_packages(daskgrad.__path__, "daskgrad.")
                            if ".dashboard" not in m.name]  # (the scheduler's page: imports bokeh's server)
    return sorted(names)


def _examples():
    finder = doctest.DocTestFinder()
    seen = set()
    for name in _modules():
        for test in finder.find(importlib.import_module(name), name):
            if test.examples and (test.filename, test.lineno) not in seen:
                seen.add((test.filename, test.lineno))
                yield test


EXAMPLES = sorted(_examples(), key=lambda t: t.name)


def test_the_package_has_examples_to_run():
    assert len(EXAMPLES) >= 20


@pytest.mark.parametrize("test", EXAMPLES, ids=lambda t: t.name)
def test_the_docstring_example_runs_as_shown(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    with dask.config.set(scheduler="synchronous"):
        exec(compile(SETUP.read_text(), str(SETUP), "exec"), namespace)
        test.globs = dict(namespace)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report = []
        result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)
