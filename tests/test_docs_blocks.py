"""Every Python code block a user reads (README.md and the pages under docs/) runs as written.

Each page's ```python blocks run in order in one fresh namespace, in an empty working directory, on
dask's synchronous scheduler unless a block connects to a cluster itself (``dg.connect("local")``:
an in-process LocalCluster, closed after the page).  A block may be marked, on the line before its
fence, with

* ``<!-- skip: REASON -->``: not run (it needs a GPU, a real cluster or a long run); the reason is
  shown as the test's skip reason.  Few blocks may be so (``MAX_SKIPPED``).
* ``<!-- excerpt: PATH -->``: a quotation of the repository's file PATH (the developer page's "adding
  an op"), checked to be there line for line instead of run.

Blocks in other languages (```bash, ```text) are not run."""
import contextlib
import os
import pathlib
import re
import warnings

import dask
import pytest

ROOT = pathlib.Path(__file__).parents[1]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
MAX_SKIPPED = 6
# packages a page may import that are extras (or optional installs of `make test`): a page whose block needs
# a missing one is skipped, saying which; any other error fails
OPTIONAL = {"torch", "xarray", "zarr", "scipy", "matplotlib", "tqdm", "graphviz"}

FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(?P<kind>skip|excerpt):\s*(?P<arg>.*?)\s*-->\s*$")


def blocks(page):
    """``(line, kind, arg, code)`` for each ```python block of ``page``: kind "run", "skip" or "excerpt"."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        if m.group("info").strip().split(" ")[0] not in ("python", "py"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        indent = len(m.group("indent"))
        code = "\n".join(ln[indent:] for ln in m.group("body").splitlines())
        found.append((line, mark.group("kind") if mark else "run", mark.group("arg") if mark else None, code))
    return found


def _close_clients(namespace):
    """Close the clients (and their local clusters) a page made, so the next page starts clean."""
    from distributed import Client

    for value in list(namespace.values()):
        if isinstance(value, Client):
            cluster = value.cluster
            value.close()
            if cluster is not None:
                cluster.close()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_of_the_page_runs_as_written(page, tmp_path):
    page_blocks = blocks(page)
    runnable = [b for b in page_blocks if b[1] == "run"]
    for line, kind, arg, code in page_blocks:
        if kind == "excerpt":
            source = (ROOT / arg).read_text()
            missing = [ln for ln in code.splitlines() if ln.strip() and ln not in source]
            assert not missing, f"{page.name}:{line} quotes {arg}, which no longer has: {missing}"
    if not runnable:
        skipped = [f"line {b[0]}: {b[2]}" for b in page_blocks if b[1] == "skip"]
        pytest.skip("; ".join(skipped) if skipped else "no python block")
    namespace = {"__name__": "__main__"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            for line, _, _, code in runnable:
                try:
                    exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), namespace)
                except ImportError as error:  # (an extra's own: daskgrad says "pip install 'daskgrad[...]'")
                    if (error.name or "").split(".")[0] in OPTIONAL or "daskgrad[" in str(error):
                        pytest.skip(f"{page.relative_to(ROOT)}:{line} needs an optional package: {error}")
                    raise
                except Exception as error:
                    raise AssertionError(f"the block at {page.relative_to(ROOT)}:{line} failed: "
                                         f"{type(error).__name__}: {error}") from error
    finally:
        os.chdir(cwd)
        with contextlib.suppress(Exception):
            _close_clients(namespace)


def test_only_a_few_blocks_are_skipped_and_each_says_why():
    skipped = [(page.relative_to(ROOT), line, arg) for page in PAGES for line, kind, arg, _ in blocks(page)
               if kind == "skip"]
    assert all(reason for _, _, reason in skipped), f"a skip without a reason: {skipped}"
    assert len(skipped) <= MAX_SKIPPED, f"{len(skipped)} blocks are skipped (at most {MAX_SKIPPED}): {skipped}"


def test_no_page_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page


def test_the_benchmark_page_is_what_its_script_writes_from_the_results():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "docs" / "make_benchmarks.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
