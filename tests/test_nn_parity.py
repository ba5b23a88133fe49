"""nn pieces people use, against torch (installed): containers, Identity/Flatten/Softmax/LogSoftmax/SiLU/LeakyReLU,
buffers, Module.to, forward (pre-)hooks, nn.init's distributions, gradient clipping, CrossEntropyLoss's
ignore_index/weight/label_smoothing, BCEWithLogitsLoss's pos_weight, Embedding's padding_idx.  Values and
gradients equal torch's at rtol 1e-9 in float64 on batches in several row chunks; bad arguments raise torch's
error types and texts."""
import math
import warnings

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")

ROWS = (3, 3, 1)  # three uneven row chunks


def _x(shape, seed=0, chunks=None):
    a = np.random.default_rng(seed).standard_normal(shape)
    chunks = chunks or (ROWS,) + tuple((n,) for n in shape[1:])
    return a, dg.from_array(a, chunks=chunks, requires_grad=True), torch.tensor(a, requires_grad=True)


def _close(a, b, **kw):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, **kw)


def _same_error(ours, theirs, names=False):
    """Both raise; same type, same text (with ``names``, torch's type names read as daskgrad's: 'torch.FloatTensor'
    is 'daskgrad.FloatTensor' here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(Exception) as got:
            ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)
    assert str(got.value) == (str(expected.value).replace("'torch.", "'daskgrad.") if names else str(expected.value))


def _forward_backward(out, tout, xd, xt):
    _close(out, tout)
    w = np.random.default_rng(1).standard_normal(tout.shape)
    (out * dg.from_array(w, chunks=out.chunks)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    _close(xd.grad, xt.grad)


# ----------------------------------------------------------------------------- activations and shape layers
LAYERS = {
    "Identity": (lambda m: m.Identity(54, unused=1), (7, 4)),
    "Flatten": (lambda m: m.Flatten(), (7, 2, 3, 2)),
    "Flatten-2-3": (lambda m: m.Flatten(2, 3), (7, 2, 3, 2)),
    "Flatten-0--2": (lambda m: m.Flatten(0, -2), (7, 2, 3)),
    "Softmax-dim1": (lambda m: m.Softmax(dim=1), (7, 4)),
    "Softmax-dim0-across-chunks": (lambda m: m.Softmax(dim=0), (7, 4)),
    "Softmax-dim-1-3d": (lambda m: m.Softmax(dim=-1), (7, 3, 4)),
    "LogSoftmax-dim1": (lambda m: m.LogSoftmax(dim=1), (7, 4)),
    "LogSoftmax-dim0-across-chunks": (lambda m: m.LogSoftmax(0), (7, 4)),
    "SiLU": (lambda m: m.SiLU(), (7, 4)),
    "LeakyReLU": (lambda m: m.LeakyReLU(), (7, 4)),
    "LeakyReLU-0.2": (lambda m: m.LeakyReLU(negative_slope=0.2), (7, 4)),
    "LeakyReLU-negative-slope": (lambda m: m.LeakyReLU(-1.5), (7, 4)),
    "ELU": (lambda m: m.ELU(), (7, 4)),
    "ELU-0.5": (lambda m: m.ELU(alpha=0.5), (7, 4)),
    "CELU-2": (lambda m: m.CELU(2.0), (7, 4)),
    "Hardtanh": (lambda m: m.Hardtanh(), (7, 4)),
    "Hardtanh--0.5-0.25": (lambda m: m.Hardtanh(-0.5, 0.25), (7, 4)),
    "ReLU6": (lambda m: m.ReLU6(), (7, 4)),
    "Threshold": (lambda m: m.Threshold(0.1, 20), (7, 4)),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_forward_and_input_gradient_equal_torch(name):
    make, shape = LAYERS[name]
    _, xd, xt = _x(shape)
    layer, tlayer = make(nn), make(torch.nn)
    _forward_backward(layer(xd), tlayer(xt), xd, xt)
    assert repr(layer) == repr(tlayer)


def test_activation_gradient_at_zero_is_torchs():
    x = np.array([0.0, -0.0, 1.0, -1.0])
    for f, tf in [(lambda t: F.leaky_relu(t, 0.3), lambda t: torch.nn.functional.leaky_relu(t, 0.3)),
                  (F.silu, torch.nn.functional.silu)]:
        xd, xt = dg.from_array(x, chunks=2, requires_grad=True), torch.tensor(x, requires_grad=True)
        _forward_backward(f(xd), tf(xt), xd, xt)


_SPECIAL = np.array([-1000.0, -3.0, -1.0, -1e-300, 0.0, -0.0, 1e-300, 0.5, 1.0, 2.0, 6.0, 1000.0, np.nan, -np.inf,
                     np.inf])


@pytest.mark.parametrize("name,kwargs", [("elu", {}), ("elu", {"alpha": 0.5}), ("celu", {"alpha": 2.0}),
                                         ("hardtanh", {}), ("hardtanh", {"min_val": -2.0, "max_val": 0.5}),
                                         ("relu6", {}), ("threshold", {"threshold": 0.5, "value": -7.0})])
def test_activations_give_torch_s_values_and_gradients_at_bounds_zeros_infinities_and_nan(name, kwargs):
    """A bound, 0, -0, huge values (whose unchosen side overflows), infinities and NaN: torch's values
    and gradients (``where`` would pass ``inf * 0 = nan`` from an unchosen ``exp(1000)``; ``clamp``'s
    gradient is 1 at a bound, hardtanh's 0).  elu's gradient is ``exp``'s, as torch's kernel (celu at -1000:
    ``exp(-500)``; ``expm1``'s rule would give 0)."""
    g = np.linspace(-1.0, 1.0, len(_SPECIAL))
    xd, xt = dg.from_array(_SPECIAL, chunks=4, requires_grad=True), torch.tensor(_SPECIAL, requires_grad=True)
    yd, yt = getattr(F, name)(xd, **kwargs), getattr(torch.nn.functional, name)(xt, **kwargs)
    yd.backward(dg.from_array(g, chunks=4))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-15, atol=0, equal_nan=True)
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-15, atol=1e-200, equal_nan=True)
    x32 = dg.from_array(_SPECIAL.astype("float32"), chunks=4)
    assert getattr(F, name)(x32, **kwargs).dtype == np.float32


@pytest.mark.parametrize("name,args", [("elu", ()), ("celu", (0.5,)), ("hardtanh", (-0.5, 0.5)), ("relu6", ()),
                                       ("threshold", (0.1, 20.0))])
def test_activations_in_place_write_their_input_with_torch_s_rules(name, args):
    x = np.linspace(-2.0, 7.0, 10)
    wd, wt = dg.from_array(x, chunks=4, requires_grad=True), torch.tensor(x, requires_grad=True)
    hd, ht = wd * 2.0, wt * 2.0
    outd = getattr(F, name)(hd, *args, inplace=True)
    outt = getattr(torch.nn.functional, name)(ht, *args, inplace=True)
    np.testing.assert_array_equal(hd.detach().numpy(), ht.detach().numpy())  # (the input written)
    _forward_backward(outd, outt, wd, wt)
    _same_error(lambda: getattr(F, name)(wd, *args, inplace=True),
                lambda: getattr(torch.nn.functional, name)(wt, *args, inplace=True))


def test_activation_bad_arguments_raise_torch_s_errors():
    _, xd, xt = _x((7, 4))
    _same_error(lambda: F.celu(xd, alpha=0.0), lambda: torch.nn.functional.celu(xt, alpha=0.0))
    _same_error(lambda: F.hardtanh(xd, 1.0, -1.0), lambda: torch.nn.functional.hardtanh(xt, 1.0, -1.0))
    _same_error(lambda: nn.Hardtanh(1.0, -1.0), lambda: torch.nn.Hardtanh(1.0, -1.0))
    for values in (np.array([1, -2, 3]), np.array([True, False])):  # torch's kernels' dtypes: its errors or values
        for name, args in [("elu", ()), ("celu", ()), ("hardtanh", ()), ("threshold", (0, 5)), ("relu6", ()),
                           ("normalize", ())]:
            ours, theirs = getattr(F, name), getattr(torch.nn.functional, name)
            try:
                want = theirs(torch.tensor(values), *args).tolist()
            except Exception:
                _same_error(lambda: ours(dg.tensor(values), *args), lambda: theirs(torch.tensor(values), *args))
            else:
                assert ours(dg.tensor(values), *args).tolist() == want


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (float("inf"), 1)])
def test_normalize_is_torch_s(p, dim):
    _, xd, xt = _x((7, 4))
    _forward_backward(F.normalize(xd, p=p, dim=dim), torch.nn.functional.normalize(xt, p=p, dim=dim), xd, xt)
    zero = np.zeros((3, 2))  # (a zero row: divided by eps)
    zd, zt = dg.from_array(zero, chunks=2, requires_grad=True), torch.tensor(zero, requires_grad=True)
    _forward_backward(F.normalize(zd), torch.nn.functional.normalize(zt), zd, zt)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(5,), (7, 4), (2, 3, 4), (2, 3, 4, 2)])
def test_functional_softmax_takes_dim_and_torchs_implicit_choice(fn, shape):
    _, xd, xt = _x(shape, chunks=tuple((n,) for n in shape))
    for dim in range(-len(shape), len(shape)):
        _close(getattr(F, fn)(xd, dim=dim), getattr(torch.nn.functional, fn)(xt, dim=dim))
    ours, theirs = getattr(F, fn)(xd, 0, dtype="float32"), getattr(torch.nn.functional, fn)(xt, 0, dtype=torch.float32)
    assert ours.dtype == np.float32 and theirs.dtype == torch.float32
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)
    with pytest.warns(UserWarning, match=f"Implicit dimension choice for {fn} has been deprecated"):
        ours = getattr(F, fn)(xd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(ours, getattr(torch.nn.functional, fn)(xt))


def test_flatten_bad_dims_raise_torchs_error():
    _, xd, xt = _x((7, 2, 3))
    _same_error(lambda: nn.Flatten(2, 1)(xd), lambda: torch.nn.Flatten(2, 1)(xt))
    _same_error(lambda: nn.Flatten(1, 5)(xd), lambda: torch.nn.Flatten(1, 5)(xt))


def test_inplace_activations_are_refused_not_ignored():
    """(LeakyReLU writes in place as torch's: tests/test_nn_loss2.py.)"""
    with pytest.raises(NotImplementedError, match="inplace=True is not supported"):
        nn.SiLU(inplace=True)


# ----------------------------------------------------------------------------------------------- containers
class _Net:
    """The same model in both libraries: a ModuleList of blocks, a ModuleDict of heads."""

    @staticmethod
    def make(m, **kw):
        class Net(m.Module):
            def __init__(self):
                super().__init__()
                self.blocks = m.ModuleList([m.Linear(4, 4, **kw), m.SiLU(), m.Linear(4, 5, **kw)])
                self.blocks.append(m.LeakyReLU(0.1))
                self.heads = m.ModuleDict({"a": m.Linear(5, 3, **kw), "b": m.Identity()})
                self.heads["c"] = m.Sequential(m.Linear(5, 2, **kw), m.LogSoftmax(dim=1))

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return [self.heads[k](x) for k in self.heads]
        return Net()


def test_modulelist_and_moduledict_register_and_run_like_torch():
    net, tnet = _Net.make(nn, dtype="float64"), _Net.make(torch.nn).double()
    assert [k for k, _ in net.named_parameters()] == [k for k, _ in tnet.named_parameters()]
    tnet.load_state_dict({k: torch.tensor(v.numpy()) for k, v in net.state_dict().items()})
    _, xd, xt = _x((7, 4))
    outs, touts = net(xd), tnet(xt)
    for o, t in zip(outs, touts):
        _close(o, t)
    sum(o.sum() for o in outs).backward()
    sum(t.sum() for t in touts).backward()
    _close(xd.grad, xt.grad)
    for (name, p), tp in zip(net.named_parameters(), tnet.parameters()):
        _close(p.grad, tp.grad, err_msg=name)
    assert repr(net.heads) == repr(tnet.heads).replace("torch.", "")


def test_modulelist_list_operations_as_torch():
    def run(m):
        ml = m.ModuleList([m.ReLU(), m.Tanh(), m.Sigmoid()])
        ml.insert(1, m.Identity())
        ml += [m.SiLU()]
        ml.extend([m.GELU()])
        popped = ml.pop(0)
        del ml[-1]
        ml[0] = m.Tanh()
        both = ml + m.ModuleList([m.ReLU()])
        return ([type(x).__name__ for x in ml], type(popped).__name__, len(ml[1:3]), list(ml._modules),
                [type(x).__name__ for x in both], type(ml[-2]).__name__)
    assert run(nn) == run(torch.nn)
    _same_error(lambda: nn.ModuleList([nn.ReLU()])[3], lambda: torch.nn.ModuleList([torch.nn.ReLU()])[3])
    _same_error(lambda: nn.ModuleList(5), lambda: torch.nn.ModuleList(5))
    _same_error(lambda: nn.ModuleList([3]), lambda: torch.nn.ModuleList([3]))
    _same_error(lambda: nn.ModuleList([nn.ReLU()])(1), lambda: torch.nn.ModuleList([torch.nn.ReLU()])(1))


def test_moduledict_mapping_operations_as_torch():
    def run(m):
        md = m.ModuleDict([("x", m.ReLU()), ("y", m.Tanh())])
        md.update({"z": m.SiLU()})
        md.update([("w", m.Identity())])
        md.pop("y")
        del md["x"]
        return list(md.keys()), [type(v).__name__ for v in md.values()], "z" in md, len(md), list(md)
    assert run(nn) == run(torch.nn)
    _same_error(lambda: nn.ModuleDict([("a", nn.ReLU(), 1)]), lambda: torch.nn.ModuleDict([("a", torch.nn.ReLU(), 1)]))
    _same_error(lambda: nn.ModuleDict({"a.b": nn.ReLU()}), lambda: torch.nn.ModuleDict({"a.b": torch.nn.ReLU()}))
    _same_error(lambda: nn.ModuleDict({"training": nn.ReLU()}),
                lambda: torch.nn.ModuleDict({"training": torch.nn.ReLU()}))
    _same_error(lambda: nn.ModuleDict(3), lambda: torch.nn.ModuleDict(3))


# -------------------------------------------------------------------------------------------------- buffers
def _with_buffers(m, **kw):
    class Norm(m.Module):
        def __init__(self):
            super().__init__()
            self.lin = m.Linear(3, 3, **kw)
            self.register_buffer("running_mean", _zeros(m, 3))
            self.register_buffer("count", _zeros(m, 1, dtype="int64"))
            self.register_buffer("scratch", _zeros(m, 3), persistent=False)
            self.register_buffer("unset", None)

        def forward(self, x):
            return self.lin(x) - self.running_mean
    return Norm()


def _zeros(m, n, dtype="float64"):
    return dg.zeros(n, dtype=dtype) if m is nn else torch.zeros(n, dtype=getattr(torch, dtype))


def test_buffers_in_state_dict_and_walks_as_torch():
    mod, tmod = _with_buffers(nn, dtype="float64"), _with_buffers(torch.nn).double()
    assert list(mod.state_dict()) == list(tmod.state_dict())
    assert [k for k, _ in mod.named_buffers()] == [k for k, _ in tmod.named_buffers()]
    assert [k for k, _ in mod.named_parameters()] == [k for k, _ in tmod.named_parameters()]
    assert len(list(mod.buffers())) == 3 and mod.unset is None
    sd = {k: torch.tensor(np.arange(v.numel(), dtype=v.numpy().dtype).reshape(v.shape) + 1)
          for k, v in mod.state_dict().items()}
    mod.load_state_dict(sd)
    tmod.load_state_dict(sd)
    for k, v in mod.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), tmod.state_dict()[k].numpy())
    bad = dict(sd, scratch=torch.zeros(3))
    _same_error(lambda: mod.load_state_dict(bad), lambda: tmod.load_state_dict(bad))
    assert mod.load_state_dict(bad, strict=False) == tmod.load_state_dict(bad, strict=False)
    mod.running_mean = dg.ones(3, dtype="float64")
    assert "running_mean" in mod._buffers and "running_mean" not in mod.__dict__
    _same_error(lambda: setattr(mod, "running_mean", 3), lambda: setattr(tmod, "running_mean", 3))
    del mod.scratch
    assert "scratch" not in mod._buffers and "scratch" not in mod._non_persistent_buffers_set


def test_register_buffer_and_parameter_errors_as_torch():
    mod, tmod = _with_buffers(nn), _with_buffers(torch.nn)
    for name, value in [(3, None), ("a.b", None), ("", None), ("lin", None), ("forward", None), ("ok", 3)]:
        _same_error(lambda: mod.register_buffer(name, value), lambda: tmod.register_buffer(name, value))
    _same_error(lambda: mod.register_parameter("p", dg.zeros(2)), lambda: tmod.register_parameter("p", torch.zeros(2)),
                names=True)
    _same_error(lambda: mod.add_module("m", 3), lambda: tmod.add_module("m", 3))
    _same_error(lambda: mod.add_module("a.b", None), lambda: tmod.add_module("a.b", None))

    class Early(nn.Module):
        def __init__(self):
            self.register_buffer("b", None)

    class TEarly(torch.nn.Module):
        def __init__(self):
            self.register_buffer("b", None)
    _same_error(Early, TEarly)


# ------------------------------------------------------------------------------------------------ Module.to
def test_module_to_dtype_converts_floating_parameters_and_buffers_in_place():
    mod = _with_buffers(nn, dtype="float32")
    weight = mod.lin.weight
    opt = dg.optim.SGD(mod.parameters(), lr=0.1)
    for call in (lambda m: m.to(torch.float64), lambda m: m.to("float32"), lambda m: m.to(np.float64),
                 lambda m: m.to(dtype="float32"), lambda m: m.to("cpu", "float64"),
                 lambda m: m.to(dg.zeros(1, dtype="float32")), lambda m: m.double()):
        assert call(mod) is mod
    assert mod.lin.weight is weight and opt.param_groups[0]["params"][0] is weight  # optimizers keep their params
    assert weight.dtype == np.float64 and weight.requires_grad and weight.is_leaf
    assert mod.running_mean.dtype == np.float64 and mod.count.dtype == np.int64  # as torch: floats only
    assert mod.float().lin.bias.dtype == np.float32 and mod.scratch.dtype == np.float32
    x = dg.ones(7, 3, chunks=(ROWS, 3))
    mod(x).sum().backward()
    assert mod.lin.weight.grad.dtype == np.float32
    mod.to("float64")
    assert mod.lin.weight.grad.dtype == np.float64  # the gradient follows, as torch's _apply


def test_module_to_device_and_refusals():
    mod, tmod = _with_buffers(nn), _with_buffers(torch.nn)
    assert mod.to("cpu") is mod and mod.cpu() is mod and mod.to(torch.device("cpu")) is mod
    assert mod.lin.weight.device == "cpu"
    for dtype in (torch.int64, "int64", np.bool_):
        with pytest.raises(TypeError, match="^nn.Module.to only accepts floating point or complex dtypes, but got "
                                            "desired dtype=(int64|bool)$"):
            mod.to(dtype)
    with pytest.raises(TypeError, match="nn.Module.to only accepts floating point or complex dtypes"):
        tmod.to(torch.int64)
    for device in ("mps", "meta", torch.device("meta")):
        with pytest.raises(RuntimeError, match="daskgrad modules live on 'cpu' .* or 'cuda'"):
            mod.to(device)
    with pytest.raises(TypeError, match="unexpected keyword argument 'memory_format'"):
        mod.to(memory_format=torch.channels_last)


# -------------------------------------------------------------------------------------------------- hooks
def _hooked(m, log):
    lin = m.Linear(3, 2)
    pre = lin.register_forward_pre_hook(lambda mod, args: log.append(("pre", len(args))) or (args[0] * 2,))
    lin.register_forward_pre_hook(lambda mod, args: log.append(("first", type(mod).__name__)), prepend=True)
    post = lin.register_forward_hook(lambda mod, args, out: log.append(("post", tuple(out.shape))) or out + 1)
    lin.register_forward_hook(lambda mod, args, kwargs, out: log.append(("kw", sorted(kwargs))), with_kwargs=True)
    lin.register_forward_pre_hook(lambda mod, args, kwargs: log.append(("prekw", len(args))), with_kwargs=True)
    return lin, pre, post


def test_forward_hooks_order_results_and_removal_as_torch():
    log, tlog = [], []
    lin, pre, post = _hooked(nn, log)
    tlin, tpre, tpost = _hooked(torch.nn, tlog)
    tlin.double().load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin.double().state_dict().items()})
    a, xd, xt = _x((7, 3))
    _close(lin(xd), tlin(xt))
    assert log == tlog
    for handle in (pre, post, tpre, tpost, pre):  # twice is fine, as torch
        handle.remove()
    log.clear(), tlog.clear()
    _close(lin(xd), tlin(xt))
    assert log == tlog and ("pre", 1) not in log
    with lin.register_forward_hook(lambda mod, args, out: out * 0):
        assert float(lin(xd).detach().abs().sum()) == 0
    assert float(lin(xd).detach().abs().sum()) != 0
    assert isinstance(pre, nn.RemovableHandle) and pre.id != post.id


def test_forward_hooks_replace_arguments_and_always_call_hooks_run_on_error():
    lin = nn.Linear(3, 2, dtype="float64")
    lin.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0] * 0,), {}), with_kwargs=True)
    np.testing.assert_allclose(lin(dg.ones(4, 3, dtype="float64")).detach().numpy(),
                               np.broadcast_to(lin.bias.detach().numpy(), (4, 2)))
    bad = nn.Linear(3, 2)
    bad.register_forward_pre_hook(lambda mod, args, kwargs: 5, with_kwargs=True)
    tbad = torch.nn.Linear(3, 2)
    tbad.register_forward_pre_hook(lambda mod, args, kwargs: 5, with_kwargs=True)
    _same_error(lambda: bad(dg.ones(1, 3)), lambda: tbad(torch.ones(1, 3)))
    seen = []
    bad.register_forward_hook(lambda mod, args, out: seen.append("always"), always_call=True)
    bad.register_forward_hook(lambda mod, args, out: seen.append("never"))
    with pytest.raises(RuntimeError):
        bad(dg.ones(1, 3))
    assert seen == ["always"]


# ------------------------------------------------------------------------------------------------- nn.init
INITS = {
    "uniform_": lambda m, t: m.init.uniform_(t, -0.3, 0.7),
    "normal_": lambda m, t: m.init.normal_(t, 0.5, 2.0),
    "trunc_normal_-std0.02": lambda m, t: m.init.trunc_normal_(t, std=0.02),  # bounds +-2 never reached
    "trunc_normal_-bounded": lambda m, t: m.init.trunc_normal_(t, std=0.02, a=-0.03, b=0.025),
    "trunc_normal_-narrow": lambda m, t: m.init.trunc_normal_(t, mean=1.0, std=2.0, a=0.5, b=1.0),
    "xavier_uniform_": lambda m, t: m.init.xavier_uniform_(t),
    "xavier_uniform_-gain": lambda m, t: m.init.xavier_uniform_(t, gain=m.init.calculate_gain("tanh")),
    "xavier_normal_": lambda m, t: m.init.xavier_normal_(t, gain=2.0),
    "kaiming_uniform_-sqrt5": lambda m, t: m.init.kaiming_uniform_(t, a=math.sqrt(5)),
    "kaiming_uniform_-relu-fan_out": lambda m, t: m.init.kaiming_uniform_(t, mode="fan_out", nonlinearity="relu"),
    "kaiming_normal_": lambda m, t: m.init.kaiming_normal_(t),
    "kaiming_normal_-fan_out": lambda m, t: m.init.kaiming_normal_(t, a=0.2, mode="fan_out"),
}


@pytest.mark.parametrize("shape", [(300, 200), (120, 50, 10)], ids=["2d", "3d-receptive-field"])
@pytest.mark.parametrize("name", list(INITS))
def test_init_draws_torchs_distribution_in_place_keeping_shape_dtype_chunks(name, shape):
    """Same bounds, mean and spread as torch's draw on the same shape (60,000 samples each)."""
    chunks = ((100, 100, 60, 40),) + tuple((n,) for n in shape[1:]) if shape[0] == 300 else \
        ((40, 40, 40), (50,), (10,))
    dg.manual_seed(0)
    w = dg.zeros(*shape, dtype="float64", chunks=chunks, requires_grad=True)
    before = w.chunks
    assert INITS[name](nn, w) is w
    assert w.shape == shape and w.dtype == np.float64 and w.chunks == before
    assert w.requires_grad and w.is_leaf and w.grad_fn is None
    ours = w.detach().numpy()
    torch.manual_seed(0)
    theirs = INITS[name](torch.nn, torch.zeros(shape, dtype=torch.float64)).numpy()
    assert abs(ours.mean() - theirs.mean()) < 0.03 * theirs.std()
    assert ours.std() == pytest.approx(theirs.std(), rel=0.03)
    if "uniform" in name or "bounded" in name or "narrow" in name:  # the extremes of 60,000 draws: at the bounds
        assert ours.min() == pytest.approx(theirs.min(), rel=2e-3, abs=2e-3 * np.ptp(theirs))
        assert ours.max() == pytest.approx(theirs.max(), rel=2e-3, abs=2e-3 * np.ptp(theirs))
    else:  # normal: no bound; the fourth moment tells it from a uniform of the same spread
        kurt = ((ours - ours.mean()) ** 4).mean() / ours.var() ** 2
        assert kurt == pytest.approx(3.0, abs=0.15)


def test_init_constant_ones_zeros_and_float32_parameter_under_no_grad():
    lin, tlin = nn.Linear(4, 3), torch.nn.Linear(4, 3)
    for f in ("ones_", "zeros_"):
        getattr(nn.init, f)(lin.weight)
        getattr(torch.nn.init, f)(tlin.weight)
        np.testing.assert_array_equal(lin.weight.detach().numpy(), tlin.weight.detach().numpy())
    nn.init.constant_(lin.bias, 0.25)
    assert lin.bias.dtype == np.float32 and np.all(lin.bias.detach().numpy() == np.float32(0.25))
    nn.init.kaiming_uniform_(lin.weight, a=math.sqrt(5))
    assert lin.weight.dtype == np.float32 and np.abs(lin.weight.detach().numpy()).max() <= 0.5


def test_init_writes_are_lazy_until_the_next_submission():
    calls = []

    def counting(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    with dask.config.set(scheduler=counting):
        w = dg.zeros(30, 20, chunks=(10, 20), requires_grad=True)
        nn.init.xavier_normal_(w)
        nn.init.trunc_normal_(w)
        assert calls == []
    assert np.abs(w.detach().numpy()).max() <= 2.0


def test_init_gains_fans_and_errors_as_torch():
    for args in [("linear",), ("conv2d",), ("sigmoid",), ("tanh",), ("relu",), ("leaky_relu",), ("leaky_relu", 0.2),
                 ("leaky_relu", 3), ("selu",)]:
        assert nn.init.calculate_gain(*args) == torch.nn.init.calculate_gain(*args)
    _same_error(lambda: nn.init.calculate_gain("swish"), lambda: torch.nn.init.calculate_gain("swish"))
    _same_error(lambda: nn.init.calculate_gain("leaky_relu", True), lambda: torch.nn.init.calculate_gain("leaky_relu",
                                                                                                          True))
    v, tv = dg.zeros(5), torch.zeros(5)
    for f in ("xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"):
        _same_error(lambda: getattr(nn.init, f)(v), lambda: getattr(torch.nn.init, f)(tv))
    _same_error(lambda: nn.init.kaiming_normal_(dg.zeros(3, 2), mode="fan_avg"),
                lambda: torch.nn.init.kaiming_normal_(torch.zeros(3, 2), mode="fan_avg"))
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        nn.init.kaiming_uniform_(dg.zeros(0, 3))
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        nn.init.trunc_normal_(dg.zeros(3), mean=10.0)
    with pytest.raises(TypeError, match="generator= is not supported"):
        nn.init.normal_(dg.zeros(3), generator=torch.Generator())


# ----------------------------------------------------------------------------------------- gradient clipping
def _grads(seed=0, scale=1.0):
    """Two chunked leaves (many chunks each) and a one-chunk one, with gradients, in both libraries."""
    rng = np.random.default_rng(seed)
    shapes, chunks = [(30, 4), (12,), (3, 3)], [((10, 10, 10), (2, 2)), ((5, 5, 2),), (3, 3)]
    ours, theirs = [], []
    for shape, ch in zip(shapes, chunks):
        v, g = rng.standard_normal(shape), rng.standard_normal(shape) * scale
        p = dg.from_array(v, chunks=ch, requires_grad=True)
        p.grad = dg.from_array(g, chunks=ch)
        t = torch.tensor(v, requires_grad=True)
        t.grad = torch.tensor(g)
        ours.append(p), theirs.append(t)
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_equals_torch_and_keeps_chunks(norm_type, max_norm):
    ps, ts = _grads()
    ps[2].grad = None  # a parameter without a gradient is skipped
    ts[2].grad = None
    total = nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(ts, max_norm, norm_type=norm_type)
    _close(total, ttotal)
    for p, t in zip(ps[:2], ts[:2]):
        assert p.grad.chunks == p.chunks
        _close(p.grad, t.grad)


def test_clip_grad_norm_is_lazy_accepts_foreach_and_single_tensor():
    ps, ts = _grads(1)
    calls = []

    def counting(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    with dask.config.set(scheduler=counting):
        total = nn.utils.clip_grad_norm_(iter(ps), 1.0, foreach=True)
        assert calls == []
    _close(total, torch.nn.utils.clip_grad_norm_(iter(ts), 1.0, foreach=True))
    for p, t in zip(ps, ts):
        _close(p.grad, t.grad)
    p, t = _grads(2)[0][0], _grads(2)[1][0]
    _close(nn.utils.clip_grad_norm_(p, 0.1), torch.nn.utils.clip_grad_norm_(t, 0.1))
    _close(p.grad, t.grad)


def test_clip_grad_norm_nonfinite_and_empty_as_torch():
    ps, ts = _grads()
    ps[0].grad = ps[0].grad * math.nan
    ts[0].grad = ts[0].grad * math.nan
    _same_error(lambda: nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True),
                lambda: torch.nn.utils.clip_grad_norm_(ts, 1.0, error_if_nonfinite=True))
    assert math.isnan(float(nn.utils.clip_grad_norm_(ps, 1.0)))
    with pytest.warns(UserWarning, match="`parameters` is an empty generator, no gradient clipping will occur."):
        assert float(nn.utils.clip_grad_norm_((p for p in []), 1.0)) == 0.0
    assert float(nn.utils.clip_grad_norm_([], 1.0)) == 0.0


def test_clip_grad_value_equals_torch():
    ps, ts = _grads(3, scale=2.0)
    assert nn.utils.clip_grad_value_(ps, 0.7) is None
    torch.nn.utils.clip_grad_value_(ts, 0.7)
    for p, t in zip(ps, ts):
        assert p.grad.chunks == p.chunks
        _close(p.grad, t.grad)


# --------------------------------------------------------------------------------------------------- losses
def _targets(n=7, classes=4, ignore=-100, seed=0):
    y = np.random.default_rng(seed).integers(0, classes, n)
    y[[1, 4]] = ignore  # two ignored rows, in different chunks
    return y


CE = {
    "default-ignores-minus-100": dict(),
    "ignore_index-in-range": dict(ignore_index=2),
    "weight": dict(weight=[0.2, 1.0, 3.0, 0.7]),
    "label_smoothing": dict(label_smoothing=0.1),
    "weight-smoothing-ignore": dict(weight=[0.2, 1.0, 3.0, 0.7], label_smoothing=0.25, ignore_index=3),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", list(CE))
def test_cross_entropy_options_values_and_gradients_equal_torch(case, reduction):
    kw = dict(CE[case])
    ignore = kw.get("ignore_index", -100)
    y = _targets(ignore=ignore)
    tkw = dict(kw, weight=torch.tensor(kw["weight"], dtype=torch.float64)) if "weight" in kw else kw
    dkw = dict(kw, weight=dg.tensor(np.array(kw["weight"]))) if "weight" in kw else kw
    _, xd, xt = _x((7, 4))
    loss = nn.CrossEntropyLoss(reduction=reduction, **dkw)(xd, dg.from_array(y, chunks=(2, 3, 2)))
    tloss = torch.nn.CrossEntropyLoss(reduction=reduction, **tkw)(xt, torch.tensor(y))
    _forward_backward(loss, tloss, xd, xt)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_weight_and_ignore_index_equal_torch(reduction):
    y = _targets(ignore=0)
    _, xd, xt = _x((7, 4))
    w = np.array([0.5, 2.0, 1.0, 0.1])
    loss = nn.NLLLoss(weight=w, ignore_index=0, reduction=reduction)(F.log_softmax(xd, 1), dg.from_array(y, chunks=3))
    tloss = torch.nn.NLLLoss(weight=torch.tensor(w), ignore_index=0, reduction=reduction)(
        torch.log_softmax(xt, 1), torch.tensor(y))
    _forward_backward(loss, tloss, xd, xt)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kw", [dict(label_smoothing=0.2), dict(weight=[0.2, 1.0, 3.0, 0.7]),
                                dict(weight=[0.2, 1.0, 3.0, 0.7], label_smoothing=0.05)],
                         ids=["smooth", "w", "w-smooth"])
def test_cross_entropy_probability_targets_with_options_equal_torch(kw, reduction):
    probs = np.random.default_rng(3).dirichlet(np.ones(4), 7)
    _, xd, xt = _x((7, 4))
    dkw = dict(kw, weight=np.array(kw["weight"])) if "weight" in kw else kw
    tkw = dict(kw, weight=torch.tensor(kw["weight"], dtype=torch.float64)) if "weight" in kw else kw
    loss = F.cross_entropy(xd, dg.from_array(probs, chunks=(ROWS, 4)), reduction=reduction, **dkw)
    tloss = torch.nn.functional.cross_entropy(xt, torch.tensor(probs), reduction=reduction, **tkw)
    _forward_backward(loss, tloss, xd, xt)


def test_cross_entropy_bad_arguments_as_torch():
    _, xd, xt = _x((7, 4))
    y = _targets()
    yd, yt = dg.from_array(y, chunks=3), torch.tensor(y)
    _same_error(lambda: F.cross_entropy(xd, yd, label_smoothing=1.5),
                lambda: torch.nn.functional.cross_entropy(xt, yt, label_smoothing=1.5))
    _same_error(lambda: F.cross_entropy(xd, yd, weight=dg.ones(3, dtype="float64")),
                lambda: torch.nn.functional.cross_entropy(xt, yt, weight=torch.ones(3, dtype=torch.float64)))
    _same_error(lambda: nn.CrossEntropyLoss(reduction="avg")(xd, yd),
                lambda: torch.nn.CrossEntropyLoss(reduction="avg")(xt, yt))
    _close(F.cross_entropy(xd, yd, label_smoothing=-0.1),  # torch: a negative smoothing is none
           torch.nn.functional.cross_entropy(xt, yt, label_smoothing=-0.1))
    bad = y.copy()
    bad[0] = 9
    _same_error(lambda: F.cross_entropy(xd, dg.from_array(bad, chunks=3)).item(),
                lambda: torch.nn.functional.cross_entropy(xt, torch.tensor(bad)))
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated, please use "
                                         "reduction='sum' instead."):
        assert nn.CrossEntropyLoss(size_average=False).reduction == "sum"
    assert list(nn.CrossEntropyLoss(weight=np.ones(4)).state_dict()) == \
        list(torch.nn.CrossEntropyLoss(weight=torch.ones(4)).state_dict()) == ["weight"]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kw", ["pos_weight", "weight", "both"])
def test_bce_with_logits_pos_weight_and_weight_equal_torch(kw, reduction):
    rng = np.random.default_rng(5)
    target = rng.uniform(size=(7, 3))
    pos_weight, weight = np.array([0.5, 2.0, 4.0]), rng.uniform(size=(7, 3))
    args = {"pos_weight": dict(pos_weight=pos_weight), "weight": dict(weight=weight),
            "both": dict(pos_weight=pos_weight, weight=weight)}[kw]
    _, xd, xt = _x((7, 3))
    xd_big = xd * 30  # large logits: the stable form
    loss = nn.BCEWithLogitsLoss(reduction=reduction, **args)(xd_big, dg.from_array(target, chunks=(ROWS, 3)))
    tloss = torch.nn.BCEWithLogitsLoss(reduction=reduction, **{k: torch.tensor(v) for k, v in args.items()})(
        xt * 30, torch.tensor(target))
    _forward_backward(loss, tloss, xd, xt)
    assert list(nn.BCEWithLogitsLoss(**args).state_dict()) == \
        list(torch.nn.BCEWithLogitsLoss(**{k: torch.tensor(v) for k, v in args.items()}).state_dict())


# ------------------------------------------------------------------------------------------------ Embedding
@pytest.mark.parametrize("padding_idx", [0, 3, -1])
def test_embedding_padding_idx_zero_row_and_no_gradient_as_torch(padding_idx):
    emb, temb = nn.Embedding(5, 3, padding_idx=padding_idx, dtype="float64"), \
        torch.nn.Embedding(5, 3, padding_idx=padding_idx).double()
    assert emb.padding_idx == temb.padding_idx
    np.testing.assert_array_equal(emb.weight.detach().numpy()[emb.padding_idx], 0)
    assert repr(emb) == repr(temb)
    w = np.random.default_rng(0).standard_normal((5, 3))  # a nonzero padding row: still no gradient
    emb.load_state_dict({"weight": w})
    temb.load_state_dict({"weight": torch.tensor(w)})
    idx = np.array([[0, 4, 4], [2, 0, 1], [3, 4, 4], [3, 1, 0]])
    out, tout = emb(dg.from_array(idx, chunks=(3, 2))), temb(torch.tensor(idx))
    _close(out, tout)
    g = np.random.default_rng(1).standard_normal(tout.shape)
    (out * dg.from_array(g, chunks=out.chunks)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    _close(emb.weight.grad, temb.weight.grad)
    np.testing.assert_array_equal(emb.weight.grad.numpy()[emb.padding_idx], 0)


def test_embedding_options_and_errors_as_torch():
    _same_error(lambda: nn.Embedding(5, 3, padding_idx=5), lambda: torch.nn.Embedding(5, 3, padding_idx=5))
    _same_error(lambda: nn.Embedding(5, 3, padding_idx=-6), lambda: torch.nn.Embedding(5, 3, padding_idx=-6))
    w = np.arange(6.0).reshape(3, 2)
    emb, temb = nn.Embedding.from_pretrained(dg.tensor(w), padding_idx=1), \
        torch.nn.Embedding.from_pretrained(torch.tensor(w), padding_idx=1)
    assert emb.weight.requires_grad == temb.weight.requires_grad is False
    _close(emb(dg.tensor(np.array([2, 1]))), temb(torch.tensor([2, 1])))
    for kw in (dict(max_norm=1.0), dict(scale_grad_by_freq=True), dict(sparse=True)):
        with pytest.raises(NotImplementedError, match="is not supported"):
            nn.Embedding(5, 3, **kw)


@pytest.mark.parametrize("name,kwargs", [
    ("l1_loss", {}), ("l1_loss", {"reduction": "sum", "weight": True}), ("smooth_l1_loss", {}),
    ("smooth_l1_loss", {"beta": 0.5, "reduction": "none"}), ("smooth_l1_loss", {"beta": 0.0}),
    ("huber_loss", {}), ("huber_loss", {"delta": 0.5, "weight": True}), ("huber_loss", {"reduction": "sum"}),
])
def test_pointwise_losses_give_torch_s_values_and_gradients_at_zero_and_at_the_threshold(name, kwargs):
    a, d, t = _x((7, 3))
    target = a.copy()
    target[0, 0] = a[0, 0]  # a zero difference: gradient 0, as torch's
    target[1, 1] = a[1, 1] - 0.5  # a difference at the threshold (beta = delta = 0.5)
    target[2] = a[2] + np.array([1.0, -1.0, 3.0])
    target[3:] = a[3:] + np.random.default_rng(1).standard_normal((4, 3))
    kw = dict(kwargs)
    t_kw, d_kw = dict(kw), dict(kw)
    if kw.get("weight"):
        w = np.random.default_rng(2).random((7, 3))
        t_kw["weight"], d_kw["weight"] = torch.tensor(w), dg.from_array(w, chunks=(ROWS, (3,)))
    ours = getattr(F, name)(d, dg.from_array(target, chunks=(ROWS, (3,))), **d_kw)
    theirs = getattr(torch.nn.functional, name)(t, torch.tensor(target), **t_kw)
    _close(ours, theirs)
    g = np.random.default_rng(3).standard_normal(tuple(theirs.shape))
    ours.backward(dg.from_array(g)) if ours.ndim else ours.backward()
    theirs.backward(torch.tensor(g)) if theirs.ndim else theirs.backward()
    _close(d.grad, t.grad)


def test_pointwise_loss_modules_and_bad_arguments_are_torch_s():
    a, d, t = _x((7, 3))
    for ours, theirs in ((nn.L1Loss(), torch.nn.L1Loss()), (nn.SmoothL1Loss(beta=0.3), torch.nn.SmoothL1Loss(beta=0.3)),
                         (nn.HuberLoss(delta=2.0), torch.nn.HuberLoss(delta=2.0))):
        _close(ours(d, d * 0.5), theirs(t, t * 0.5))
    x = dg.ones(3)
    with pytest.raises(RuntimeError, match="^smooth_l1_loss does not support negative values for beta.$"):
        F.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(RuntimeError, match="^huber_loss does not support non-positive values for delta.$"):
        F.huber_loss(x, x, delta=0.0)
    with pytest.raises(ValueError, match="^foo is not a valid value for reduction$"):
        F.l1_loss(x, x, reduction="foo")
    with pytest.raises(ValueError, match="^Weights and input must have the same size.$"):
        F.l1_loss(x, x, weight=dg.ones(2))


@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"elementwise_affine": False}, {"eps": 1e-3}])
def test_layer_norm_repr_is_torch_s(kwargs):
    assert repr(dg.nn.LayerNorm((4, 3), **kwargs)) == repr(torch.nn.LayerNorm((4, 3), **kwargs))
