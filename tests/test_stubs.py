"""IDEs and type checkers see what daskgrad builds at import time: the Tensor methods attached from
the op table and the ops of ``daskgrad.ops`` are listed, with their signatures, in the stubs that
tools/make_stubs.py writes (``daskgrad/_tensor.pyi``, ``daskgrad/ops/__init__.pyi``), and the package
is marked typed (PEP 561).  A stub that differs from what the script writes now fails here."""
import ast
import importlib.util
import pathlib
import tomllib

import pytest

import daskgrad as dg

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _make_stubs():
    spec = importlib.util.spec_from_file_location("make_stubs", ROOT / "tools" / "make_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _defined(tree):
    """Names a stub module (or class body) binds: defs, classes, annotated names, imports."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _stub(path):
    return ast.parse((ROOT / path).read_text())


@pytest.mark.parametrize("path", ["daskgrad/_tensor.pyi", "daskgrad/ops/__init__.pyi"])
def test_each_stub_is_what_make_stubs_writes_from_the_package_now(path):
    expected = _make_stubs().STUBS[path]()
    assert (ROOT / path).read_text() == expected, f"{path} is stale: run `make stubs` (python tools/make_stubs.py)"


def test_the_tensor_stub_lists_every_method_and_attribute_of_tensor():
    tensor_class = next(n for n in _stub("daskgrad/_tensor.pyi").body
                        if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    listed = _defined(tensor_class)
    public = {n for n in dir(dg.Tensor) if not n.startswith("_")}
    assert public - listed == set()
    assert {"sum", "exp", "backward", "compute", "grad", "requires_grad", "__add__", "__radd__", "__iadd__",
            "__getitem__", "__setitem__", "_repr_html_"} <= listed


def test_the_ops_stub_defines_every_op_with_its_signature_and_all():
    tree = _stub("daskgrad/ops/__init__.pyi")
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert set(dg.ops.__all__) <= set(defs)
    listed_all = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__")
    assert ast.literal_eval(listed_all.value) == dg.ops.__all__  # `from .ops import *` in daskgrad sees them all
    total = defs["sum"].args
    assert [a.arg for a in total.args] == ["x", "axis", "keepdims", "dtype"]
    assert [a.arg for a in total.kwonlyargs] == ["dim", "keepdim"]  # torch's spellings, accepted too
    assert ast.unparse(defs["exp"].returns) == "Tensor"


def test_the_package_is_marked_typed_and_ships_its_stubs():
    assert (ROOT / "daskgrad" / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = package_data["daskgrad"]
    assert "py.typed" in shipped
    for stub in _make_stubs().STUBS:
        relative = pathlib.Path(stub).relative_to("daskgrad")
        assert any(relative.match(pattern) for pattern in shipped), f"{stub} is not in the package data"


@pytest.mark.slow
def test_a_type_checker_follows_ops_and_methods_to_tensors_where_mypy_is_installed(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (not a dependency of daskgrad)")
    user = tmp_path / "user.py"
    user.write_text("import daskgrad as dg\n"
                    "x = dg.tensor([1.0, 2.0], requires_grad=True)\n"
                    "reveal_type(dg.exp(x).sum(dim=0, keepdim=True))\n"
                    "reveal_type(x.grad)\n"
                    "reveal_type(dg.split(x, 2))\n"
                    "x.no_such_method()\n")
    out, _, _ = api.run(["--ignore-missing-imports", "--follow-imports=silent", "--no-incremental", str(user)])
    assert 'Revealed type is "daskgrad._tensor.Tensor"' in out
    assert 'Revealed type is "daskgrad._tensor.Tensor | None"' in out
    assert 'Revealed type is "list[daskgrad._tensor.Tensor]"' in out
    assert '"Tensor" has no attribute "no_such_method"' in out
