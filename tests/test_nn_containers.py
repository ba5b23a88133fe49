"""nn.Unflatten, nn.ParameterList and nn.ParameterDict against torch (installed): the same operations on both
give the same registrations (parameters(), state_dict keys), lengths, indexing, reprs and errors."""
from collections import OrderedDict

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn

torch = pytest.importorskip("torch")


def _t(lib, shape):
    a = np.arange(float(np.prod(shape))).reshape(shape)
    return torch.tensor(a) if lib is torch else dg.from_array(a, chunks=1)


def _repr(lib, m):
    """torch's repr with daskgrad's names of types (``daskgrad.float64``, ``daskgrad.DoubleTensor``)."""
    return repr(m).replace("torch.", "daskgrad.") if lib is torch else repr(m)


def _error(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001  (the type and text are compared with torch's)
        return type(e).__name__, str(e)
    return None


@pytest.mark.parametrize("dim,size,shape", [(1, (2, 3), (4, 6)), (-1, [3, -1], (2, 6)), (0, (1, 2), (2, 3)),
                                            (1, (5,), (2, 5))])
def test_unflatten_values_gradients_and_repr_are_torch_s(dim, size, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    xd, xt = dg.from_array(x, chunks=1, requires_grad=True), torch.tensor(x, requires_grad=True)
    md, mt = nn.Unflatten(dim, size), torch.nn.Unflatten(dim, size)
    assert repr(md) == repr(mt)
    yd, yt = md(xd), mt(xt)
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g))
    yt.backward(torch.tensor(g))
    y, gx = dg.compute(yd.detach(), xd.grad)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(gx, xt.grad.numpy())


@pytest.mark.parametrize("args", [(1, 5), (1, [2, "a"]), (1, (2.0, 3))])
def test_unflatten_refuses_a_size_that_is_not_ints_as_torch(args):
    assert _error(lambda: nn.Unflatten(*args)) == _error(lambda: torch.nn.Unflatten(*args))


def _list_story(lib):
    """Every ParameterList operation, and what each shows."""
    pl = lib.nn.ParameterList([_t(lib, (2, 3)), lib.nn.Parameter(_t(lib, (4,))), "x", None])
    pl.append(_t(lib, (1,)))
    pl += [_t(lib, (2,))]
    pl.extend((_t(lib, (3, 1)),))
    pl[2] = _t(lib, (5,))  # a plain object replaced by a tensor: now a parameter
    pl[-3] = _t(lib, (2, 2))
    seen = [repr(type(pl[i]).__name__) for i in range(len(pl))] + [str(len(pl)), str(len(pl[1:6:2]))]
    seen += [str(tuple(p.shape)) for p in pl if hasattr(p, "shape")]
    seen += [str([k for k, _ in pl.named_parameters()]), str(list(pl.state_dict())), str(len(list(pl.parameters())))]
    seen += [str(tuple(pl[1:3][1].shape)), str(type(pl[:2]).__name__)]
    outer = lib.nn.Module()
    outer.pl = pl
    seen += [str(list(outer.state_dict())), _repr(lib, pl), _repr(lib, outer)]
    seen += [str(_error(f)) for f in (lambda: pl[9], lambda: pl[-10], lambda: pl.extend(_t(lib, (2,))),
                                      lambda: pl.extend(3), lambda: pl(), lambda: pl["a"])]
    seen.append(str(_error(lambda: pl.__setitem__(0, "s"))))  # a parameter's place takes no other object
    return [s.replace("torch.Size(", "").replace("])", ")").replace("[", "(") for s in seen]


def test_parameter_list_registers_indexes_and_prints_as_torch_s():
    ours, theirs = _list_story(dg), _list_story(torch)
    assert ours == theirs


def test_parameter_list_parameters_train():
    """A parameter of the list gets its gradient through a model that holds the list."""
    pl = nn.ParameterList([dg.ones(3, dtype="float64"), dg.full((3,), 2.0, dtype="float64")])
    loss = (pl[0] * pl[1]).sum()
    loss.backward()
    np.testing.assert_array_equal(pl[0].grad.numpy(), [2.0, 2.0, 2.0])
    assert all(p.requires_grad and p.is_leaf for p in pl.parameters())


def _dict_story(lib):
    """Every ParameterDict operation, and what each shows."""
    P = lib.nn.ParameterDict
    pd = P({"b": _t(lib, (2,)), "a": 3})  # a plain dict: sorted
    pd["c"] = lib.nn.Parameter(_t(lib, (1, 2)))
    pd.update([("e", _t(lib, (3,))), ("d", None)])
    pd.update(OrderedDict([("g", _t(lib, (1,))), ("f", "s")]))
    seen = [str(list(pd)), str(list(pd.keys())), str([type(v).__name__ for v in pd.values()]),
            str([k for k, _ in pd.items()]), str(list(reversed(pd))), str(len(pd)), str("a" in pd), str("z" in pd)]
    seen += [str([k for k, _ in pd.named_parameters()]), str(list(pd.state_dict())), _repr(lib, pd)]
    seen += [str(pd.get("z", 5)), str(pd.get("a")), str(pd.setdefault("a", 7)), str(pd.setdefault("h", None))]
    seen += [str(pd.pop("a")), str(pd.popitem()[0]), str(list(pd))]
    c = pd.copy()
    seen += [str(list(c)), str(c["b"] is pd["b"])]
    del c["b"]
    seen += [str(list(c)), str(list(pd))]
    seen += [str(list(pd | P(OrderedDict(z=None)))), str(list(P(OrderedDict(z=None)) | pd))]
    pd |= P(OrderedDict(y=_t(lib, (2,))))
    seen += [str(list(pd)), str(list(pd.fromkeys(["u", "v"], 1)))]
    outer = lib.nn.Module()
    outer.pd = pd
    seen += [str(list(outer.state_dict())), _repr(lib, outer)]
    seen += [str(_error(f)) for f in (lambda: pd[1], lambda: pd["nope"], lambda: pd.update(5),
                                      lambda: pd.update([(1, 2, 3)]), lambda: pd.update([5]), lambda: pd(1),
                                      lambda: pd.__setitem__("b", "s"))]
    pd.clear()
    seen += [str(len(pd)), str(list(pd.parameters()))]
    return seen


def test_parameter_dict_registers_indexes_and_prints_as_torch_s():
    ours, theirs = _dict_story(dg), _dict_story(torch)
    assert ours == theirs
