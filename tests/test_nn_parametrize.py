"""torch.nn.utils.parametrize, parametrizations.weight_norm / spectral_norm and the hook-based weight_norm /
spectral_norm against torch 2.13 in float64: classes, reprs, state_dict keys, values and gradients over one, even
and uneven chunkings of the input batch, power-iteration buffers step for step, and errors.  Cases follow torch's
test/nn/test_parametrization.py."""
import copy
import pickle
import re
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

CHUNKINGS = {"one": 6, "even": 3, "uneven": 4}
X = np.cos(np.arange(6 * 4.0)).reshape(6, 4)


def _np(t):
    return t.detach().numpy()


def _dg(value):
    return dg.tensor(value.detach().numpy() if hasattr(value, "detach") else value)


def _copy_state(t, d):
    """torch's state (parameters and buffers, power-iteration vectors included) into the daskgrad module."""
    d.load_state_dict({k: _dg(v) for k, v in t.state_dict().items()})


def _text(message):
    """torch's message as daskgrad prints it (``daskgrad.float32``, ``daskgrad.Size``)."""
    return re.sub(r"\btorch\.", "daskgrad.", message)


def _same_error(run_t, run_d):
    """The same exception type and text (up to the library's name) from torch and daskgrad."""
    with pytest.raises(Exception) as et:
        run_t()
    with pytest.raises(type(et.value), match=re.escape(_text(str(et.value)).strip("'\""))):
        run_d()


def _parametrizations(m):
    """The parametrizations of torch's tests, for torch (``m = torch``) or daskgrad."""
    class Symmetric(m.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).T

        def right_inverse(self, A):
            return A.triu()

    class Double(m.nn.Module):
        def forward(self, X):
            return 2.0 * X

        def right_inverse(self, A):
            return A / 2.0

    class Skew(m.nn.Module):  # no right_inverse
        def forward(self, X):
            X = X.tril(-1)
            return X - X.T

    class RankOne(m.nn.Module):
        def forward(self, x, y):
            return x.unsqueeze(-1) @ y.unsqueeze(-2)

        def right_inverse(self, Z):
            return Z[:, 0], Z[0, :]

    class ToFloat32(m.nn.Module):
        def forward(self, X):
            return X.to(m.float32)

    class FirstRow(m.nn.Module):
        def forward(self, X):
            return X[0]

    return {"Symmetric": Symmetric, "Double": Double, "Skew": Skew, "RankOne": RankOne, "ToFloat32": ToFloat32,
            "FirstRow": FirstRow}


def _pair(names, n=4, unsafe=False):
    """A 4 x 4 Linear in torch and daskgrad with torch's values, then the parametrizations ``names`` on its weight."""
    mods = []
    for m in (torch, dg):
        lin = m.nn.Linear(n, n, dtype=m.float64)
        kinds = _parametrizations(m)
        mods.append((lin, m, kinds))
    t, d = mods[0][0], mods[1][0]
    _copy_state(t, d)
    for lin, m, kinds in mods:
        for name in names:
            m.nn.utils.parametrize.register_parametrization(lin, "weight", kinds[name](), unsafe=unsafe)
    return t, d


def _forward_backward(t, d, chunking):
    yt = t(torch.tensor(X))
    yd = d(dg.from_array(X, chunks=(CHUNKINGS[chunking], 4)))
    np.testing.assert_allclose(_np(yd), _np(yt), rtol=1e-10)
    (yt ** 2).sum().backward()
    (yd ** 2).sum().backward()
    grads_t = dict(t.named_parameters())
    for name, p in d.named_parameters():
        np.testing.assert_allclose(_np(p.grad), _np(grads_t[name].grad), rtol=1e-10, atol=1e-14, err_msg=name)


# ----------------------------------------------------------------------------------------------- parametrize
def test_a_parametrized_linear_has_torchs_class_repr_state_dict_and_parameter_names():
    t, d = _pair(["Symmetric"])
    assert type(d).__name__ == type(t).__name__ == "ParametrizedLinear"
    assert isinstance(d, dg.nn.Linear)
    assert repr(d) == repr(t)
    assert list(d.state_dict()) == list(t.state_dict()) == ["bias", "parametrizations.weight.original"]
    assert [n for n, _ in d.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert isinstance(d.parametrizations, dg.nn.ModuleDict)
    assert type(d.parametrizations.weight).__name__ == "ParametrizationList"
    assert isinstance(d.parametrizations.weight.original, dg.nn.Parameter)
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-14)
    assert d.weight.grad_fn is not None and d.weight is not d.weight  # computed at each read


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("names", [["Symmetric"], ["Symmetric", "Double"], ["Skew"], ["RankOne"]],
                         ids=lambda n: "+".join(n))
def test_outputs_and_gradients_through_parametrizations_equal_torchs(names, chunking):
    t, d = _pair(names)
    assert list(d.state_dict()) == list(t.state_dict())
    for name, value in t.state_dict().items():
        np.testing.assert_allclose(_np(d.state_dict()[name]), _np(value), rtol=1e-14, err_msg=name)
    _forward_backward(t, d, chunking)


def test_stacked_parametrizations_are_one_list_and_assignment_runs_their_right_inverses_in_reverse():
    t, d = _pair(["Symmetric", "Double"])
    assert repr(d) == repr(t)
    assert len(d.parametrizations.weight) == 2
    original = d.parametrizations.weight.original
    A = np.arange(16.0).reshape(4, 4)
    A = A + A.T
    t.weight = torch.tensor(A)
    d.weight = dg.tensor(A)
    assert d.parametrizations.weight.original is original  # written in place: an optimizer keeps it
    np.testing.assert_allclose(_np(original), _np(t.parametrizations.weight.original), rtol=1e-14)
    np.testing.assert_allclose(_np(d.weight), A, rtol=1e-14)


def test_several_original_tensors_are_original0_original1():
    t, d = _pair(["RankOne"])
    assert list(d.state_dict()) == list(t.state_dict()) == \
        ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert not hasattr(d.parametrizations.weight, "original")
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-14)
    Z = np.outer(np.arange(1.0, 5.0), np.arange(2.0, 6.0))
    t.weight = torch.tensor(Z)
    d.weight = dg.tensor(Z)
    for i in range(2):
        np.testing.assert_allclose(_np(getattr(d.parametrizations.weight, f"original{i}")),
                                   _np(getattr(t.parametrizations.weight, f"original{i}")), rtol=1e-14)


@pytest.mark.parametrize("leave_parametrized", [True, False])
def test_removing_a_parametrization_gives_the_class_and_a_parameter_back(leave_parametrized):
    t, d = _pair(["Symmetric"])
    original = d.parametrizations.weight.original
    for m, lin in ((torch, t), (dg, d)):
        m.nn.utils.parametrize.remove_parametrizations(lin, "weight", leave_parametrized=leave_parametrized)
    assert type(d) is dg.nn.Linear and not hasattr(d, "parametrizations")
    assert d.weight is original and isinstance(d.weight, dg.nn.Parameter)
    assert list(d.state_dict()) == list(t.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-14)
    assert d.weight.chunks == ((4,), (4,))


def test_removing_several_original_tensors_leaves_the_parametrized_value_or_refuses():
    t, d = _pair(["RankOne"])
    _same_error(lambda: torch.nn.utils.parametrize.remove_parametrizations(t, "weight", leave_parametrized=False),
                lambda: dg.nn.utils.parametrize.remove_parametrizations(d, "weight", leave_parametrized=False))
    for m, lin in ((torch, t), (dg, d)):
        m.nn.utils.parametrize.remove_parametrizations(lin, "weight")
    assert isinstance(d.weight, dg.nn.Parameter) and d.weight.grad_fn is None
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-14)


def test_removing_one_of_two_parametrized_names_keeps_the_class():
    for m in (torch, dg):
        lin = m.nn.Linear(3, 3, dtype=m.float64)
        kinds = _parametrizations(m)
        P = m.nn.utils.parametrize
        P.register_parametrization(lin, "weight", kinds["Symmetric"]())
        P.register_parametrization(lin, "bias", kinds["Double"]())
        cls = type(lin)
        P.remove_parametrizations(lin, "bias")
        assert type(lin) is cls and P.is_parametrized(lin) and not P.is_parametrized(lin, "bias")
        assert P.type_before_parametrizations(lin) is m.nn.Linear
        assert list(lin.state_dict()) == ["bias", "parametrizations.weight.original"]
        P.remove_parametrizations(lin, "weight")
        assert type(lin) is m.nn.Linear and P.type_before_parametrizations(lin) is m.nn.Linear


def test_is_parametrized_and_type_before_parametrizations_answer_as_torchs():
    for m in (torch, dg):
        P = m.nn.utils.parametrize
        lin = m.nn.Linear(3, 3)
        assert not P.is_parametrized(lin) and not P.is_parametrized(lin, "weight")
        assert P.type_before_parametrizations(lin) is m.nn.Linear
        P.register_parametrization(lin, "weight", _parametrizations(m)["Skew"]())
        assert P.is_parametrized(lin) and P.is_parametrized(lin, "weight") and not P.is_parametrized(lin, "bias")
        assert P.type_before_parametrizations(lin) is m.nn.Linear and type(lin) is not m.nn.Linear


def test_cached_computes_each_parametrized_tensor_once_inside_the_block():
    counts = {}
    for m in (torch, dg):
        class Counted(m.nn.Module):
            def forward(self, X):
                counts[m] = counts.get(m, 0) + 1
                return X

        lin = m.nn.Linear(3, 3)
        m.nn.utils.parametrize.register_parametrization(lin, "weight", Counted())
        counts[m] = 0
        with m.nn.utils.parametrize.cached():
            a, b = lin.weight, lin.weight
            with m.nn.utils.parametrize.cached():
                c = lin.weight
        assert a is b is c
        lin.weight
        assert counts[m] == 2
    assert counts[torch] == counts[dg]


def test_a_buffer_can_be_parametrized():
    for m in (torch, dg):
        bn = m.nn.BatchNorm1d(3, dtype=m.float64)
        m.nn.utils.parametrize.register_parametrization(bn, "running_var", _parametrizations(m)["Double"]())
        keys = list(bn.state_dict())
        assert "parametrizations.running_var.original" in keys and "running_var" not in keys
        assert not isinstance(bn.parametrizations.running_var.original, m.nn.Parameter)
        np.testing.assert_array_equal(_np(bn.running_var), [1.0, 1.0, 1.0])  # (the original: right_inverse's)
        np.testing.assert_array_equal(_np(bn.parametrizations.running_var.original), [0.5, 0.5, 0.5])
        assert [n for n, _ in bn.named_buffers()] == \
            ["running_mean", "num_batches_tracked", "parametrizations.running_var.original"]


def test_an_unsafe_parametrization_may_change_shape_and_dtype():
    for m in (torch, dg):
        lin = m.nn.Linear(3, 3, dtype=m.float64)
        kinds = _parametrizations(m)
        m.nn.utils.parametrize.register_parametrization(lin, "weight", kinds["FirstRow"](), unsafe=True)
        assert tuple(lin.weight.shape) == (3,)
        m.nn.utils.parametrize.register_parametrization(lin, "weight", kinds["ToFloat32"](), unsafe=True)
        assert lin.weight.dtype == m.float32 and lin.parametrizations.weight.unsafe


def test_deepcopy_keeps_the_parametrization_and_pickling_refuses_as_torch():
    t, d = _pair(["Symmetric"])
    c = copy.deepcopy(d)
    assert type(c) is type(d) and c.parametrizations.weight.original is not d.parametrizations.weight.original
    np.testing.assert_array_equal(_np(c.weight), _np(d.weight))
    _same_error(lambda: pickle.dumps(t), lambda: pickle.dumps(d))


def test_transfer_parametrizations_and_params_shares_the_originals():
    for m in (torch, dg):
        P = m.nn.utils.parametrize
        src, dst = m.nn.Linear(3, 3, dtype=m.float64), m.nn.Linear(3, 3, dtype=m.float64)
        P.register_parametrization(src, "weight", _parametrizations(m)["Symmetric"]())
        P.transfer_parametrizations_and_params(src, dst)
        assert P.is_parametrized(dst, "weight") and type(dst).__name__ == "ParametrizedLinear"
        assert dst.parametrizations.weight.original is src.parametrizations.weight.original
        assert dst.parametrizations.weight[0] is src.parametrizations.weight[0]
        np.testing.assert_array_equal(_np(dst.weight), _np(src.weight))
        bare = m.nn.Module()
        P.transfer_parametrizations_and_params(src, bare, "weight")
        assert list(bare.state_dict()) == ["parametrizations.weight.original"]


def test_parametrize_errors_are_torchs():
    def both(build, act):
        mods = []
        for m in (torch, dg):
            lin = m.nn.Linear(3, 3, dtype=m.float64)
            build(m, lin, _parametrizations(m))
            mods.append((m, lin, _parametrizations(m)))
        _same_error(lambda: act(*mods[0]), lambda: act(*mods[1]))

    def nothing(m, lin, kinds):
        pass

    def skew(m, lin, kinds):
        m.nn.utils.parametrize.register_parametrization(lin, "weight", kinds["Skew"]())

    register = lambda name, kind, **kw: lambda m, lin, kinds: \
        m.nn.utils.parametrize.register_parametrization(lin, name, kinds[kind](), **kw)  # noqa: E731
    both(nothing, register("nope", "Skew"))
    both(nothing, register("weight", "ToFloat32"))
    both(nothing, register("weight", "FirstRow"))
    both(skew, register("weight", "ToFloat32"))
    both(skew, register("weight", "FirstRow"))
    both(nothing, lambda m, lin, kinds: m.nn.utils.parametrize.remove_parametrizations(lin, "weight"))
    both(skew, lambda m, lin, kinds: setattr(lin, "weight", m.zeros(3, 3, dtype=m.float64)))  # no right_inverse
    both(skew, lambda m, lin, kinds: setattr(lin, "weight", m.nn.Parameter(m.zeros(3, 3, dtype=m.float64))))
    both(nothing, lambda m, lin, kinds: m.nn.utils.parametrize.ParametrizationList([], lin.weight))

    class BadInverse:
        def __init__(self, m, value):
            class Mod(m.nn.Module):
                def forward(self, X):
                    return X

                def right_inverse(self, X):
                    return value(m, X)
            self.mod = Mod
    for value in (lambda m, X: 3, lambda m, X: (X, 3), lambda m, X: X.to(m.float32)):
        both(nothing, lambda m, lin, kinds, value=value: m.nn.utils.parametrize.register_parametrization(
            lin, "weight", BadInverse(m, value).mod()))


# ------------------------------------------------------------------------------------------------ weight norm
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("dim", [0, 1, None, -2])
def test_weight_norm_parametrization_equals_torchs(dim, chunking):
    mods = [m.nn.utils.parametrizations.weight_norm(m.nn.Linear(4, 4, dtype=m.float64), dim=dim) for m in (torch, dg)]
    t, d = mods
    _copy_state(t, d)
    assert repr(d) == repr(t) and type(d).__name__ == "ParametrizedLinear"
    assert list(d.state_dict()) == list(t.state_dict()) == \
        ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert d.parametrizations.weight.original0.shape == tuple(t.parametrizations.weight.original0.shape)
    _forward_backward(t, d, chunking)


def test_weight_norm_parametrization_of_a_convolution_and_its_removal():
    t, d = (m.nn.utils.parametrizations.weight_norm(m.nn.Conv2d(2, 3, 2, dtype=m.float64), dim=1)
            for m in (torch, dg))
    _copy_state(t, d)
    x = np.sin(np.arange(4 * 2 * 4 * 4.0)).reshape(4, 2, 4, 4)
    yt, yd = t(torch.tensor(x)), d(dg.from_array(x, chunks=(3, 2, 4, 4)))
    np.testing.assert_allclose(_np(yd), _np(yt), rtol=1e-10)
    yt.sum().backward()
    yd.sum().backward()
    for i in range(2):
        np.testing.assert_allclose(_np(getattr(d.parametrizations.weight, f"original{i}").grad),
                                   _np(getattr(t.parametrizations.weight, f"original{i}").grad), rtol=1e-10)
    for m, conv in ((torch, t), (dg, d)):
        m.nn.utils.parametrize.remove_parametrizations(conv, "weight")
    assert type(d) is dg.nn.Conv2d and list(d.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-12)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("dim", [0, None])
def test_hook_based_weight_norm_equals_torchs_with_its_warning(dim, chunking):
    mods = []
    for m in (torch, dg):
        with pytest.warns(FutureWarning, match=re.escape("`torch.nn.utils.weight_norm` is deprecated in favor of "
                                                         "`torch.nn.utils.parametrizations.weight_norm`.")):
            mods.append(m.nn.utils.weight_norm(m.nn.Linear(4, 4, dtype=m.float64), dim=dim))
    t, d = mods
    _copy_state(t, d)
    assert list(d.state_dict()) == list(t.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert type(d) is dg.nn.Linear
    _forward_backward(t, d, chunking)
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-12)
    for m, lin in ((torch, t), (dg, d)):
        m.nn.utils.remove_weight_norm(lin)
    assert list(d.state_dict()) == list(t.state_dict()) == ["bias", "weight"]
    assert isinstance(d.weight, dg.nn.Parameter) and d.weight.grad_fn is None
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-12)


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")
def test_hook_based_weight_norm_errors_are_torchs():
    t, d = (m.nn.utils.weight_norm(m.nn.Linear(3, 3)) for m in (torch, dg))
    _same_error(lambda: torch.nn.utils.weight_norm(t), lambda: dg.nn.utils.weight_norm(d))
    _same_error(lambda: torch.nn.utils.remove_weight_norm(t, "bias"), lambda: dg.nn.utils.remove_weight_norm(d, "bias"))
    _same_error(lambda: torch.nn.utils.weight_norm(torch.nn.LazyLinear(3)),
                lambda: dg.nn.utils.weight_norm(dg.nn.LazyLinear(3)))


# ---------------------------------------------------------------------------------------------- spectral norm
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("n_power_iterations", [1, 3])
def test_spectral_norm_parametrization_equals_torchs_step_for_step(n_power_iterations, chunking):
    torch.manual_seed(0)
    t, d = (m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(4, 5, dtype=m.float64),
                                                      n_power_iterations=n_power_iterations) for m in (torch, dg))
    assert repr(d) == repr(t)
    assert list(d.state_dict()) == list(t.state_dict()) == \
        ["bias", "parametrizations.weight.original", "parametrizations.weight.0._u", "parametrizations.weight.0._v"]
    _copy_state(t, d)
    u = d.parametrizations.weight[0]._u
    for step in range(2):  # training: u and v move at each forward
        _forward_backward(t, d, chunking)
        assert d.parametrizations.weight[0]._u is u
        for k, v in t.state_dict().items():
            np.testing.assert_allclose(_np(d.state_dict()[k]), _np(v), rtol=1e-10, err_msg=f"{k} after {step}")
        for m in (t, d):
            m.zero_grad()
    for m in (t, d):
        m.eval()
    before = _np(u)
    _forward_backward(t, d, chunking)
    np.testing.assert_array_equal(_np(u), before)  # eval: no power iteration


def test_spectral_norm_of_a_transposed_convolution_normalizes_dim_1_and_a_vector_exactly():
    torch.manual_seed(0)
    t, d = (m.nn.utils.parametrizations.spectral_norm(m.nn.ConvTranspose1d(3, 2, 2, dtype=m.float64))
            for m in (torch, dg))
    assert d.parametrizations.weight[0].dim == t.parametrizations.weight[0].dim == 1
    assert d.parametrizations.weight[0]._u.shape == tuple(t.parametrizations.weight[0]._u.shape) == (2,)
    _copy_state(t, d)
    x = np.cos(np.arange(4 * 3 * 5.0)).reshape(4, 3, 5)
    np.testing.assert_allclose(_np(d(dg.from_array(x, chunks=(3, 3, 5)))), _np(t(torch.tensor(x))), rtol=1e-10)
    t, d = (m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(3, 3, dtype=m.float64), "bias")
            for m in (torch, dg))
    _copy_state(t, d)
    assert list(d.state_dict()) == list(t.state_dict())
    np.testing.assert_allclose(_np(d.bias), _np(t.bias), rtol=1e-14)


def test_spectral_norm_errors_are_torchs():
    for make in (lambda m: m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(3, 3), "nope"),
                 lambda m: m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(3, 3), dim=2),
                 lambda m: m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(3, 3), dim=-3),
                 lambda m: m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(3, 3), n_power_iterations=0),
                 lambda m: m.nn.utils.spectral_norm(m.nn.Linear(3, 3), n_power_iterations=0),
                 lambda m: m.nn.utils.spectral_norm(m.nn.Linear(3, 3, bias=False), "bias"),
                 lambda m: m.nn.utils.spectral_norm(m.nn.utils.spectral_norm(m.nn.Linear(3, 3))),
                 lambda m: m.nn.utils.remove_spectral_norm(m.nn.Linear(3, 3)),
                 lambda m: m.nn.utils.spectral_norm(m.nn.LazyLinear(3))):
        _same_error(lambda: make(torch), lambda: make(dg))


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_hook_based_spectral_norm_equals_torchs_step_for_step(chunking):
    torch.manual_seed(0)
    t, d = (m.nn.utils.spectral_norm(m.nn.Linear(4, 5, dtype=m.float64)) for m in (torch, dg))
    assert list(d.state_dict()) == list(t.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    _copy_state(t, d)
    for _ in range(2):
        _forward_backward(t, d, chunking)
        for k, v in t.state_dict().items():
            np.testing.assert_allclose(_np(d.state_dict()[k]), _np(v), rtol=1e-10, err_msg=k)
        for m in (t, d):
            m.zero_grad()
    for m, lin in ((torch, t), (dg, d)):
        m.nn.utils.remove_spectral_norm(lin)
    assert list(d.state_dict()) == list(t.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(_np(d.weight), _np(t.weight), rtol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(d.weight, dg.nn.Parameter)


def test_spectral_norm_trains_with_sgd_and_two_forwards_before_one_backward_as_torchs():
    torch.manual_seed(0)
    t, d = (m.nn.utils.parametrizations.spectral_norm(m.nn.Linear(4, 5, dtype=m.float64)) for m in (torch, dg))
    _copy_state(t, d)
    ot, od = torch.optim.SGD(t.parameters(), lr=0.1), dg.optim.SGD(d.parameters(), lr=0.1)
    for _ in range(2):  # each forward moves u and v; its backward reads the values it used (torch's clones)
        for m, opt, a, b in ((t, ot, torch.tensor(X), torch.tensor(X[::-1].copy())),
                             (d, od, dg.from_array(X, chunks=(4, 4)), dg.from_array(X[::-1].copy(), chunks=(3, 4)))):
            opt.zero_grad()
            ((m(a) ** 2).sum() - m(b).sum()).backward()
            opt.step()
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(_np(d.state_dict()[k]), _np(v), rtol=1e-10, atol=1e-15, err_msg=k)
