"""The package is a house on floors: a module imports only from floors below it, at module top.

The one knot allowed sits inside ``ops/``: linear ops whose rules are each other's transposes
(shape, reductions, indexing, products, linalg) import each other late.  Dask's graph internals and
distributed's private API are imported only behind one door, ``daskgrad/_dask``, which imports
nothing of daskgrad but ``chunk``; there, one module (``internals``) lists them, and the
dashboard page imports distributed's web internals.  Read with ``ast``: nothing is imported to check it.
"""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "daskgrad"

# bottom to top; a module may import modules of its own floor only where said below
FLOORS = [
    ["chunk", "_dask", "_modes", "lost", "_data", "serialization", "return_types"],
    ["_state", "_repr"],
    ["_tensor"],
    ["graph"],
    ["runtime"],
    ["ops"],
    ["engine", "anomaly"],
    ["function", "functional", "testing", "memory", "optimize", "_lbfgsb", "checkpoint", "interop", "compiler",
     "func"],
    ["nn", "optim", "cluster", "dashboard", "autograd", "utils", "linalg", "cuda"],
    ["__init__"],
]
SAME_FLOOR = {("function", "functional"), ("testing", "functional"), ("optim", "nn"), ("autograd", "functional"),
              ("autograd", "function"), ("autograd", "testing"), ("memory", "engine"), ("checkpoint", "nn"),
              ("engine", "anomaly"), ("optimize", "_lbfgsb"), ("optimize", "compiler"), ("optimize", "func")}
# late imports among these are allowed
OPS_KNOT = {"shape", "reductions", "indexing", "products", "linalg", "elementwise"}
DASK_INTERNALS = ("dask.highlevelgraph", "dask.blockwise", "dask._task_spec", "dask.core", "dask.order",
                  "dask.callbacks", "dask.array.optimization", "distributed.active_memory_manager",
                  "distributed.diagnostics", "distributed.http", "distributed.dashboard", "distributed.scheduler",
                  "distributed.worker")


def _unit(path):
    """The floor unit of a module: its top-level name in the package (``ops``, ``_dask``, ``engine``)."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def _imports(path):
    """(line, imported module, at module top?) of every import in ``path``, made absolute."""
    tree = ast.parse(path.read_text())
    package = ["daskgrad", *path.relative_to(PACKAGE).with_suffix("").parts[:-1]]
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            names = [mod] if node.module or not node.level else [f"{mod}.{a.name}" for a in node.names]
            for m in names:
                yield node.lineno, m, id(node) in top


def _floor(unit):
    for i, floor in enumerate(FLOORS):
        if unit in floor:
            return i
    raise AssertionError(f"daskgrad/{unit} is on no floor: add it to FLOORS in tests/test_floors.py")


def test_every_module_imports_only_from_floors_below_it_at_module_top():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        for line, mod, at_top in _imports(path):
            if not mod.startswith("daskgrad.") and mod != "daskgrad":
                continue
            parts = mod.split(".")
            if len(parts) < 2:
                continue
            other = parts[1]
            where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"
            if other == unit:
                inner = path.relative_to(PACKAGE).with_suffix("").parts
                if unit == "ops" and not at_top and inner[-1] in OPS_KNOT and len(parts) > 2 and parts[2] in OPS_KNOT:
                    continue  # the documented knot of linear ops
                if not at_top and unit == "ops":
                    wrong.append(where + " (late, inside ops but outside the knot)")
                elif not at_top:
                    wrong.append(where + " (late)")
                continue
            if unit == "__init__" or (unit, other) in SAME_FLOOR:
                if not at_top:
                    wrong.append(where + " (late)")
                continue
            if _floor(other) >= _floor(unit):
                wrong.append(where + f" (floor {_floor(other)} from floor {_floor(unit)})")
            elif not at_top:
                wrong.append(where + " (late)")
    assert not wrong, "\n".join(wrong)


def test_dask_internals_are_imported_only_by_the_door_s_list_which_imports_only_chunk():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        inside = _unit(path) == "_dask"
        for line, mod, _ in _imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"
            if mod.startswith(DASK_INTERNALS) and path.name not in ("internals.py", "dashboard.py"):
                wrong.append(where)  # behind the door, one list of them (the dashboard's web internals apart)
            if inside and mod.startswith("daskgrad.") and not mod.startswith(("daskgrad._dask", "daskgrad.chunk")):
                wrong.append(where)
    assert not wrong, "\n".join(wrong)


def test_no_function_is_over_60_lines_unless_its_docstring_says_why():
    """A function longer than a screen says in its docstring why it is one piece ("Long because").
    Its docstring does not count: a public function documents each argument (numpydoc)."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    lines -= first.end_lineno - first.lineno + 1
                if lines > 60 and "Long because" not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "\n".join(long)
