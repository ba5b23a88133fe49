"""Mixed index forms, with torch as the oracle: ints (negative too), slices with steps, None, Ellipsis, lists,
integer tensors (1-D and 2-D), boolean masks (over one axis or two), Python bools and 0-d tensors, in any
mix of up to four on 1-D to 3-D tensors.  torch applies the basic part (ints, slices, None) first, as a view,
then one gather over the broadcast advanced indices, their axes in place when side by side and first when
something separates them.  For each form, on one of four chunkings in turn, daskgrad and torch must agree
on ``x[idx]`` (values, dtype, shape, grad_fn), the float64 gradient through it, ``x[idx] = v``
(broadcast ``v``), the gradients through that assignment (of ``x`` and of ``v``), and on an in-place
update of ``x[idx]`` (written through to ``x`` where torch's result is a view, not where it copies).
Where torch raises, daskgrad raises the same type with the same text.

A boolean tensor mask alone stays lazy in daskgrad (its count unknown until computed): that length alone
may read NaN; the computed values must still equal torch's.  Negative steps are daskgrad's own (torch
refuses them: docs/semantics.md) and are checked against NumPy in their own test."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

CHUNKINGS = ("one", "even", "uneven", "size1")
SHAPES = {1: (5,), 2: (4, 5), 3: (3, 4, 5)}
MASKS = {3: [True, False, True], 4: [False, True, True, False], 5: [True, False, False, True, True]}
CONSUMES = {"None": 0, "...": 0, "True": 0, "False": 0, "b0": 0, "M2": 2}

# (ndim, tokens): i1/i-1 ints, ":" "1:" "::2" "1:4:2" slices, L02/L-10 lists, T20/T2d int64 tensors (1-D,
# 2-D), M1/M2 boolean tensor masks over one/two axes, t0/b0 0-d int64/bool tensors, True/False bools
FORMS = [
    (1, "None i1"), (1, "L02 None"), (1, "None L02"), (1, "True"), (1, "False"), (1, "True L02"), (1, "M1"),
    (1, "None M1"), (1, "M1 None"), (1, "... T2d"), (1, "T2d None"), (1, "b0"), (1, "t0"), (1, "True i1"),
    (1, "False ..."), (1, "None None L-10"), (1, "... ..."), (1, "i1 i1"), (1, "L02 L02"), (1, "M1 True"),
    (2, "None i1 L02"), (2, "i1 None L02"), (2, "L02 None L-10"), (2, "L02 : "), (2, ": L02"), (2, "L02 i1"),
    (2, "i-1 L02"), (2, "L02 1:4:2"), (2, "::2 L-10"), (2, "T2d i1"), (2, "i1 T2d"), (2, "T2d ::2"),
    (2, ": T2d"), (2, "T20 T2d"), (2, "T2d T20"), (2, "L02 T20"), (2, "M1 L-10"), (2, "L-10 M1"),
    (2, ": M1"), (2, "1: M1"), (2, "M1 ::2"), (2, "M1 i1"), (2, "i-1 M1"), (2, "M2"), (2, "None M2"),
    (2, "M2 None"), (2, "... M1"), (2, "M1 ..."), (2, "True i1"), (2, "True L02"), (2, "L02 True"),
    (2, "False L02"), (2, "True True"), (2, "i1 False"), (2, "b0 T20"), (2, "t0 T20"), (2, "T20 b0"),
    (2, "None ... L02"), (2, "L02 ... None"), (2, "... L02 None"), (2, "T2d None ::2"), (2, "None T2d None"),
    (2, "L02 L02 L02"), (2, "M1 M1"), (2, "T2d L-10"), (2, "L02 L-10"), (2, "... ... i1"), (2, "i1 ... ..."),
    (3, "None i1 L02"), (3, "i1 : L02"), (3, "L02 : L02"), (3, "L02 i1 L02"), (3, "L02 None L02"),
    (3, "T2d : T20"), (3, ": T2d T20"), (3, "T20 ... T2d"), (3, "i-1 T2d ::2"), (3, "1: L02 i1"),
    (3, "M1 : L02"), (3, "L02 : M1"), (3, ": M1 L02"), (3, "M2 L02"), (3, "L02 M2"), (3, "i1 M2"),
    (3, "M2 i-1"), (3, "None M2 1:"), (3, ": : M1"), (3, ": M1 :"), (3, "M1 None i1"), (3, "True M2"),
    (3, "M2 True"), (3, "True i1 L02"), (3, "L02 True i1"), (3, "False : L02"), (3, "i1 False L02"),
    (3, "... L02 None"), (3, "None ... T2d"), (3, "L02 ... L02"), (3, "T2d ... i1"), (3, "b0 L02 t0"),
    (3, "t0 L02 b0"), (3, "1:4:2 None L02"), (3, "L02 L02 None"), (3, "None L02 L02"), (3, "L-10 None T20 :"),
    (3, "True None L02 i1"), (3, ": None M1 i1"), (3, "i-1 T20 None ..."), (3, "L02 ... None L-10"),
    (3, "M1 M1 M1"), (3, "M1 T2d ::2"), (3, "T20 1: T20"), (3, "::2 T20 T2d"), (3, "L02 L02 L02 L02"),
    (3, "i1 i1 i1 i1"), (3, "M2 M2"), (3, "T20 L-10"), (3, "... ... L02"), (3, "... i1 ..."),
    (3, "None ... ... M1"),
]


def _chunks(shape, chunking):
    def axis(n):
        if chunking == "one" or n < 2:
            return (n,)
        if chunking == "even":
            return (n // 2, n - n // 2)
        if chunking == "uneven":
            return (n - n // 3, n // 3) if n > 2 else (1, 1)
        return (1,) * n
    return tuple(axis(n) for n in shape)


def _dims(tokens, ndim):
    """The axis each token lands on (for a mask's shape)."""
    consumed = sum(CONSUMES.get(t, 1) for t in tokens)
    pos, out = 0, []
    for t in tokens:
        out.append(pos)
        pos += max(ndim - consumed, 0) if t == "..." else CONSUMES.get(t, 1)
    return out


def _key(tokens, shape, lib, chunking):
    plain = {"i1": 1, "i-1": -1, ":": slice(None), "1:": slice(1, None), "::2": slice(None, None, 2),
             "1:4:2": slice(1, 4, 2), "None": None, "...": Ellipsis, "L02": [0, 2], "L-10": [-1, 0, 1],
             "True": True, "False": False}
    key = []
    for t, d in zip(tokens, _dims(tokens, len(shape))):
        if t in plain:
            key.append(plain[t])
            continue
        n = shape[d] if d < len(shape) else 3
        n2 = shape[d + 1] if d + 1 < len(shape) else 4
        a = {"T20": np.array([2, 0]), "T2d": np.array([[0, 1], [2, 0]]), "t0": np.array(1), "b0": np.array(True),
             "M1": np.array(MASKS.get(n, [True] * n)), "M2": np.arange(n * n2).reshape(n, n2) % 3 == 1}[t]
        key.append(torch.tensor(a) if lib is torch else dg.from_array(a, chunks=1 if chunking == "size1" else -1))
    return tuple(key)


def _numpy(t):
    return np.asarray(t.detach().numpy())


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001  (the oracle's exception, whatever it is, is what must match)
        return "error", type(e).__name__, str(e).split("\n")[0]


def _run(lib, tokens, shape, chunking):
    """Each check's outcome: ("ok", result) or ("error", type, text)."""
    x0 = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) / 4 - 3

    def make(a, requires_grad=False):
        if lib is torch:
            return torch.tensor(a, requires_grad=requires_grad)
        return dg.from_array(a, chunks=_chunks(a.shape, chunking), requires_grad=requires_grad)

    key = _key(tokens, shape, lib, chunking)
    got = {}

    def get():
        y = make(x0)[key]
        v = _numpy(y)
        got["shape"] = v.shape
        return v, str(v.dtype), tuple(y.shape), type(y.grad_fn).__name__ if y.grad_fn is not None else None

    def grad():
        x = make(x0, True)
        y = x[key]
        (y * y + y).sum().backward()
        return _numpy(x.grad)

    def assign():
        x = make(x0)
        vshape = got.get("shape", ())[-1:]
        x[key] = make(-np.arange(1.0, 1.0 + int(np.prod(vshape))).reshape(vshape))
        return _numpy(x)

    def assign_grad():
        x = make(x0, True)
        y = x * 1
        vshape = got.get("shape", ())
        v = make(-(np.arange(int(np.prod(vshape)), dtype=np.float64).reshape(vshape) % 7) - 1, True)
        y[key] = v
        (y * make(np.arange(x0.size, dtype=np.float64).reshape(shape) % 5 + 1)).sum().backward()
        return _numpy(x.grad), _numpy(v.grad)

    def in_place():
        x = make(x0)
        y = x[key]
        y.mul_(2)
        y.add_(1)
        return _numpy(x), _numpy(y), bool(y._is_view())

    return {name: _outcome(fn) for name, fn in
            (("get", get), ("grad", grad), ("assign", assign), ("assign_grad", assign_grad), ("in_place", in_place))}


def _same(expected, got, name):
    if expected[0] == "error":
        assert got[0] == "error", f"{name}: torch raises {expected[1]}: {expected[2]}, daskgrad computes"
        assert got[1:] == expected[1:], name
        return
    assert got[0] == "ok", f"{name}: torch computes, daskgrad raises {got[1]}: {got[2]}"
    e, g = expected[1], got[1]
    if name == "get":
        np.testing.assert_array_equal(g[0], e[0])
        assert g[0].shape == e[0].shape and g[1] == e[1] and g[3] == e[3], name
        assert all(a == b or b != b for a, b in zip(e[2], g[2])) and len(e[2]) == len(g[2]), name  # NaN: lazy mask
        return
    for a, b in zip(e if isinstance(e, tuple) else (e,), g if isinstance(g, tuple) else (g,)):
        if isinstance(a, np.ndarray):
            assert a.shape == b.shape, name
            np.testing.assert_array_equal(b, a, err_msg=name)
        else:
            assert a == b, name


@pytest.mark.parametrize("ndim,form", FORMS, ids=[f"{n}d[{f}]" for n, f in FORMS])
def test_mixed_index_forms_match_torch(ndim, form):
    tokens = tuple(form.split())
    chunking = CHUNKINGS[FORMS.index((ndim, form)) % len(CHUNKINGS)]
    expected = _run(torch, tokens, SHAPES[ndim], chunking)
    got = _run(dg, tokens, SHAPES[ndim], chunking)
    for name in expected:
        _same(expected[name], got[name], name)


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("index", [(-1, slice(None, None, -2)), (slice(None, None, -1), 1), slice(None, None, -1),
                                   (Ellipsis, slice(3, 0, -1)), slice(None, None, 0), ([0, 1], slice(None, None, 0)),
                                   ([0, 9], slice(None, None, -1)), (np.ones(3, bool), slice(None, None, -1))])
def test_negative_and_zero_steps_raise_torch_s_errors(chunking, index):
    # torch has no negative steps (docs/semantics.md: flip does it); getting and setting raise its ValueError,
    # before anything is recorded or written, and before an advanced index's own errors (torch checks those after)
    x0 = np.arange(20.0).reshape(4, 5)
    t = torch.from_numpy(x0.copy())
    with pytest.raises(ValueError) as expected:
        t[index]
    x = dg.from_array(x0, chunks=_chunks(x0.shape, chunking), requires_grad=True)
    with pytest.raises(ValueError, match=f"^{expected.value}$"):
        x[index]
    with pytest.raises(ValueError) as expected_set:
        t[index] = 1.0
    z = dg.from_array(x0, chunks=_chunks(x0.shape, chunking))
    with pytest.raises(ValueError, match=f"^{expected_set.value}$"):
        z[index] = 1.0
    assert z._version == 0
    np.testing.assert_array_equal(_numpy(z), x0)
