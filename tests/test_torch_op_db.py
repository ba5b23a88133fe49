"""torch's own ``op_db``, method by method: every method daskgrad's Tensor has is called as a PyTorch user
would call it, on torch's sample inputs, and must give torch's answer.

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` whose name, an alias or
a method/in-place variant is a method (or attribute) of both ``torch.Tensor`` and ``daskgrad.Tensor``,
the float64 sample inputs (a few per op, spread over torch's list) are converted to daskgrad tensors
chunked in two along their first dimension, and the METHOD is called with the same arguments on both.
Each call is one of:

* ``same``: torch's values, structure (tuple length, named-tuple type and fields), shapes, dtypes,
  ``requires_grad`` and gradients (of a weighted sum of the float outputs, with a fixed random cotangent);
* ``torch-error``: torch raises and daskgrad raises an exception of the same type;
* ``gap``: torch computes and daskgrad raises, or both raise with different types; listed, with the
  reason, in ``torch_op_db_gaps.txt``;
* ``silent``: anything else, a different number, shape, dtype or structure without an error, which
  always fails (but for ``DELIBERATE`` differences, documented in docs/user-guide/torch.md, counted apart).

A call listed in the gaps file that now gives torch's result fails too (remove it from the list), as
does a gap not listed: the list is regenerated, and the counts printed, by
``python tests/test_torch_op_db.py --update`` (``--only NAME`` shows one OpInfo's calls and samples).
A length daskgrad knows only when computed (a masked selection) is compared on the computed value.
"""
from __future__ import annotations

import collections
import hashlib
import pathlib
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

import daskgrad as dg  # noqa: E402

GAPS_FILE = pathlib.Path(__file__).with_name("torch_op_db_gaps.txt")
# torch leaves these values unset (uninitialized memory): only shapes, dtypes and structure are compared
# and these draw random numbers, from torch's generator there and daskgrad's here (tests/test_tensor_methods_more.py
# checks their distributions)
UNSET_VALUES = {"new_empty", "uniform_", "normal_", "exponential_", "cauchy_", "log_normal_", "geometric_", "random_",
                "bernoulli", "bernoulli_", "multinomial"}
# differences on purpose, documented in docs/user-guide/torch.md ("What differs, on purpose"): counted, never failing
DELIBERATE = {"imag": "t.imag of a real tensor is zeros (NumPy's), where torch raises: xarray's duck-array check "
                      "reads the attribute, and only an AttributeError would pass it",
              "svd": "singular vectors are unique up to their signs, which depend on the LAPACK build (torch's MKL, "
                     "NumPy's OpenBLAS): U and V (and gradients through them) may differ by a column's sign"}
SAMPLES_PER_OP = 5
RTOL, ATOL = 1e-7, 1e-10
_DTYPES = {getattr(torch, n): np.dtype(n) for n in ("float16", "float32", "float64", "int8", "int16", "int32",
                                                    "int64", "uint8", "bool", "complex64", "complex128")}


# ------------------------------------------------------------------ the calls
def _variant_names(op):
    names = {op.name}
    for v in (op, *op.aliases):
        names.add(v.name)
        for f in (v.method_variant, v.inplace_variant):
            if getattr(f, "__name__", None):
                names.add(f.__name__)
    return names


def _methods(op):
    """The names under which both Tensors have this OpInfo's op as a method or attribute."""
    return sorted(n for n in _variant_names(op)
                  if hasattr(torch.Tensor, n) and hasattr(dg.Tensor, n) and (not n.startswith("__") or n == op.name))


def _samples(op):
    """Up to SAMPLES_PER_OP of the op's float64 samples, spread over torch's list, as (index, sample)."""
    key = _op_id(op)
    if key not in _SAMPLES:
        _SAMPLES[key] = _pick_samples(op)
    return _SAMPLES[key]


_SAMPLES = {}


def _pick_samples(op):
    torch.manual_seed(0)
    grad = op.supports_autograd and torch.float64 in op.supported_dtypes("cpu")
    samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=grad))
    picks = sorted({i * len(samples) // SAMPLES_PER_OP for i in range(min(SAMPLES_PER_OP, len(samples)))})
    return [(i, samples[i]) for i in picks]


def _op_id(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


CASES = [(op, name) for op in op_db for name in _methods(op)]


def call_id(op, name, index):
    return f"{_op_id(op)}:{name}:{index}"


# ----------------------------------------------------------- running one call
def _tree_map(fn, x):
    if isinstance(x, torch.Size):
        return tuple(x)
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields") and type(x) in (list, tuple):
        return type(x)(_tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: _tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _leaves(item)]
    return [x]


def _torch_copy(x):
    return x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x


def _to_daskgrad(x):
    """A daskgrad leaf with a torch tensor's values, chunked in two along its first dimension."""
    if isinstance(x, torch.Tensor):
        a = x.detach().resolve_conj().numpy()
        chunks = tuple(((n + 1) // 2 if i == 0 and n >= 2 else max(n, 1)) for i, n in enumerate(a.shape))
        return dg.from_array(a, chunks=chunks, requires_grad=x.requires_grad)
    if isinstance(x, torch.dtype):
        return _DTYPES[x]
    if isinstance(x, torch.device):
        return dg.device(str(x))
    if isinstance(x, torch.memory_format):
        return getattr(dg, str(x).removeprefix("torch."))
    if isinstance(x, torch.nn.PairwiseDistance):  # (triplet_margin_with_distance_loss's distance_function)
        return dg.nn.PairwiseDistance(x.norm, x.eps, x.keepdim)
    return x


def _apply(lib, inp, name, args, kwargs):
    """``inp.<name>(*args, **kwargs)`` (an attribute is read), in-place methods on a copy of ``inp``."""
    if name.endswith("_") and not name.endswith("__"):
        inp = inp.clone()
    attr = getattr(inp, name)
    if isinstance(getattr(type(inp), name, None), property) or not callable(attr):
        if args or kwargs:
            raise TypeError(f"{name} is an attribute")
        return attr
    return attr(*args, **kwargs)


class Outcome(collections.namedtuple("Outcome", "category reason")):
    pass


def _error(e):
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:150]}"


def _structure(out):
    """A call's result as (kind, fields, leaves): kind the named tuple's name (or 'tuple'/'leaf')."""
    if isinstance(out, tuple):
        fields = getattr(type(out), "_fields", None) or getattr(type(out), "__match_args__", None)
        kind = type(out).__name__ if fields else "tuple"
        return kind, tuple(fields or ()), list(out)
    if isinstance(out, list):
        return "list", (), list(out)
    return "leaf", (), [out]


def _dtype(t):
    return _DTYPES.get(t.dtype, t.dtype) if isinstance(t, torch.Tensor) else t.dtype


def _compare_leaves(tl, dl, value):
    """Why torch's result leaf ``tl`` and daskgrad's ``dl`` (its computed ``value``) differ, or None."""
    t_tensor, d_tensor = isinstance(tl, torch.Tensor), isinstance(dl, dg.Tensor)
    if t_tensor != d_tensor:
        return f"torch gives a {type(tl).__name__}, daskgrad a {type(dl).__name__}"
    if not t_tensor:
        if type(tl) is not type(dl) and not (isinstance(tl, bool) and isinstance(dl, (bool, np.bool_))):
            return f"torch gives a {type(tl).__name__}, daskgrad a {type(dl).__name__}"
        if isinstance(tl, (int, float, complex)) and not np.allclose(tl, dl, rtol=RTOL, atol=ATOL, equal_nan=True):
            return f"value {dl!r} where torch gives {tl!r}"
        return None
    shape = tuple(dl.shape) if all(n == n for n in dl.shape) else np.shape(value)  # (lengths known when computed)
    if tuple(tl.shape) != shape:
        return f"shape {list(shape)} where torch's is {list(tl.shape)}"
    if _dtype(tl) != dl.dtype:
        return f"dtype {dl.dtype} where torch's is {_dtype(tl)}"
    if tl.requires_grad != dl.requires_grad:
        return f"requires_grad {dl.requires_grad} where torch's is {tl.requires_grad}"
    return None


def _close(t_value, d_value):
    t_value, d_value = np.asarray(t_value), np.asarray(d_value)
    if t_value.dtype.kind in "fc":
        single = np.finfo(t_value.dtype).eps > 1e-10  # (float32: torch's and NumPy's kernels round differently)
        return np.allclose(d_value, t_value, rtol=1e-5 if single else RTOL, atol=1e-6 if single else ATOL,
                           equal_nan=True)
    return np.array_equal(d_value, t_value)


def _cotangent(key, shape):
    """A fixed random cotangent for output ``key`` (seeded by its name: the same in every run)."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    return np.random.default_rng(seed).standard_normal(shape)


def run_call(op, name, index, sample):
    """Call the method on torch and on daskgrad; classify what came back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = _run_call(op, name, call_id(op, name, index), sample)
    if outcome.category == "silent" and name in DELIBERATE:
        return Outcome("deliberate", f"{outcome.reason} ({DELIBERATE[name]})")
    return outcome


def _run_call(op, name, key, sample):
    t_inp, t_args, t_kwargs = (_tree_map(_torch_copy, v) for v in (sample.input, sample.args, sample.kwargs))
    try:
        t_out = _apply(torch, t_inp, name, t_args, t_kwargs)
        t_kind, t_fields, t_leaves = _structure(t_out)
        t_values = [tl.detach().resolve_conj().numpy() if isinstance(tl, torch.Tensor) else tl for tl in t_leaves]
    except Exception as e:  # noqa: BLE001 - torch's refusal, to be matched
        t_error = e
    else:
        t_error = None
    try:
        d_inp, d_args, d_kwargs = (_tree_map(_to_daskgrad, v) for v in (t_inp, t_args, t_kwargs))
        d_out = _apply(dg, d_inp, name, d_args, d_kwargs)
        d_kind, d_fields, d_leaves = _structure(d_out)
        d_tensors = [dl for dl in d_leaves if isinstance(dl, dg.Tensor)]
        computed = iter(dg.compute(*[dl.detach() for dl in d_tensors]) if d_tensors else ())
        d_values = [next(computed) if isinstance(dl, dg.Tensor) else dl for dl in d_leaves]
    except Exception as e:  # noqa: BLE001 - a gap, or torch's refusal matched
        if t_error is None:
            return Outcome("gap", _error(e))
        if type(e) is not type(t_error):
            return Outcome("gap", f"{_error(e)} where torch raises {_error(t_error)}")
        return Outcome("torch-error", _error(t_error))
    if t_error is not None:
        return Outcome("silent", f"daskgrad computes where torch raises {_error(t_error)}")
    if (t_kind, t_fields, len(t_leaves)) != (d_kind, d_fields, len(d_leaves)):
        return Outcome("silent", f"a {d_kind}{list(d_fields) or ''} of {len(d_leaves)} where torch gives a "
                                 f"{t_kind}{list(t_fields) or ''} of {len(t_leaves)}")
    for i, (tl, dl, tv, dv) in enumerate(zip(t_leaves, d_leaves, t_values, d_values)):
        why = _compare_leaves(tl, dl, dv)
        if why is None and isinstance(tl, torch.Tensor) and name not in UNSET_VALUES and not _close(tv, dv):
            why = f"values differ (max |diff| {np.nanmax(np.abs(np.asarray(dv) - tv), initial=0):.3g})"
        if why:
            return Outcome("silent", f"output {i}: {why}")
    return _compare_gradients(key, t_inp, t_args, t_kwargs, d_inp, d_args, d_kwargs, t_leaves, d_leaves)


def _compare_gradients(key, t_inp, t_args, t_kwargs, d_inp, d_args, d_kwargs, t_leaves, d_leaves):
    """Backward of ``sum(out_i * cotangent_i)`` over the float outputs that require grad, on both."""
    pairs = [(tl, dl) for tl, dl in zip(t_leaves, d_leaves)
             if isinstance(tl, torch.Tensor) and tl.requires_grad and tl.dtype.is_floating_point]
    t_in = [x for x in _leaves([t_inp, t_args, list(t_kwargs.values())])
            if isinstance(x, torch.Tensor) and x.requires_grad]
    d_in = [x for x in _leaves([d_inp, d_args, list(d_kwargs.values())])
            if isinstance(x, dg.Tensor) and x.requires_grad]
    if not pairs or not t_in:
        return Outcome("same", "")
    # an output of a length known only when computed (a masked selection) is weighted by one number, its own
    # values by themselves (a cotangent of a known shape cannot meet it lazily)
    unknown = [any(n != n for n in dl.shape) for _, dl in pairs]
    cots = [_cotangent(f"{key}/{i}", () if u else tuple(tl.shape))
            for i, ((tl, _), u) in enumerate(zip(pairs, unknown))]
    try:
        t_loss = sum((((tl * tl.detach()) if u else tl) * torch.from_numpy(c)).sum()
                     for (tl, _), c, u in zip(pairs, cots, unknown))
        t_grads = torch.autograd.grad(t_loss, t_in, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        t_error = e
    else:
        t_error = None
    try:
        d_loss = sum((((dl * dl.detach()) if u else dl) * c).sum() for (_, dl), c, u in zip(pairs, cots, unknown))
        d_grads = dg.grad(d_loss, d_in, allow_unused=True)
        d_grads = [None if g is None else g.numpy() for g in d_grads]
    except Exception as e:  # noqa: BLE001
        if t_error is None:
            return Outcome("gap", f"backward: {_error(e)}")
        if type(e) is not type(t_error):
            return Outcome("gap", f"backward: {_error(e)} where torch raises {_error(t_error)}")
        return Outcome("torch-error", f"backward: {_error(t_error)}")
    if t_error is not None:
        return Outcome("silent", f"backward computes where torch raises {_error(t_error)}")
    for i, (tg, dgv) in enumerate(zip(t_grads, d_grads)):
        tv = np.zeros(tuple(t_in[i].shape)) if tg is None else tg.numpy(force=True)  # (a ZeroTensor too)
        dv = np.zeros(tv.shape) if dgv is None else dgv
        if tv.shape != dv.shape or not _close(tv, dv):
            return Outcome("silent", f"gradient of input {i} differs (max |diff| "
                                     f"{np.nanmax(np.abs(dv - tv), initial=0) if tv.shape == dv.shape else 'shape'})")
    return Outcome("same", "")


# ------------------------------------------------------------ the expected gaps
def read_gaps(path=GAPS_FILE):
    """call id -> reason, from the checked-in list."""
    gaps = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, reason = line.partition("  ")
                gaps[key.strip()] = reason.strip()
    return gaps


def run_all(cases=CASES):
    """call id -> Outcome, for every call."""
    return {call_id(op, name, i): run_call(op, name, i, s) for op, name in cases for i, s in _samples(op)}


def _sample_text(sample):
    def text(x):
        return f"{x.dtype} {list(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)
    return (f"input {_tree_map(text, sample.input)}, args {_tree_map(text, list(sample.args))}, "
            f"kwargs {_tree_map(text, dict(sample.kwargs))}")


# ------------------------------------------------------------------------ tests
@pytest.mark.parametrize("op,name", CASES, ids=[f"{_op_id(op)}:{name}" for op, name in CASES])
def test_method_gives_torch_s_result_or_torch_s_error(op, name):
    listed = read_gaps()
    problems, gaps = [], []
    for i, sample in _samples(op):
        key = call_id(op, name, i)
        outcome = run_call(op, name, i, sample)
        if outcome.category == "silent":
            problems.append(f"{key}: SILENT: {outcome.reason}")
        elif outcome.category == "gap":
            if key in listed:
                gaps.append(key)
            else:
                problems.append(f"{key}: a gap not in {GAPS_FILE.name}: {outcome.reason}")
        elif key in listed:
            problems.append(f"{key}: listed as a gap in {GAPS_FILE.name} but gives torch's "
                            f"{'error' if outcome.category == 'torch-error' else 'result'}: remove it")
    assert not problems, "\n".join(problems)
    if gaps:
        pytest.xfail(f"{len(gaps)} listed gap(s): " + "; ".join(f"{k}: {listed[k]}" for k in gaps))


def test_the_gaps_file_lists_only_calls_that_are_run():
    run = {call_id(op, name, i) for op, name in CASES for i, _ in _samples(op)}
    assert not set(read_gaps()) - run, sorted(set(read_gaps()) - run)


def test_at_least_95_percent_of_calls_give_torch_s_result_or_torch_s_error():
    total = sum(len(_samples(op)) for op, _ in CASES)
    gaps = len(read_gaps())
    print(f"\nop_db: {len(CASES)} (op, method) pairs, {total} calls, {gaps} listed gaps "
          f"({100 * (total - gaps) / total:.1f}% torch's result or error)")
    assert gaps <= 0.05 * total


def main(argv):
    """``--update``: run every call, print the counts and rewrite the gaps file; else only print.
    ``--only NAME``: the calls of the OpInfos named NAME, with their samples (nothing written)."""
    if "--only" in argv:
        name = argv[argv.index("--only") + 1]
        for op, method in CASES:
            if _op_id(op) == name or op.name == name:
                for i, s in _samples(op):
                    print(call_id(op, method, i), run_call(op, method, i, s), _sample_text(s))
        return
    outcomes = run_all()
    counts = collections.Counter(o.category for o in outcomes.values())
    for key, o in sorted(outcomes.items()):
        if o.category == "silent":
            print(f"SILENT {key}: {o.reason}")
    print(dict(counts), f"{len(CASES)} (op, method) pairs, {len(outcomes)} calls")
    if "--update" in argv:
        lines = [f"{k}  {o.reason}" for k, o in sorted(outcomes.items()) if o.category == "gap"]
        GAPS_FILE.write_text("# op_db calls where daskgrad raises and torch computes (or raises another type):\n"
                             "# written by `python tests/test_torch_op_db.py --update`; tests/test_torch_op_db.py "
                             "fails while it is stale.\n" + "".join(line + "\n" for line in lines))
    if "--verbose" in argv:
        for key, o in sorted(outcomes.items()):
            if o.category == "gap":
                print(f"GAP {key}: {o.reason}")


if __name__ == "__main__":
    import dask

    with dask.config.set(scheduler="sync"):
        main(sys.argv[1:])
