"""torch.nn's lazy modules against torch 2.13 in float64: the first forward infers the input size and the module
becomes the real class; after loading torch's materialized weights, outputs and gradients equal torch's over one
chunk, even and uneven chunkings; reprs, state_dicts, loading, and errors."""
import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn as nn

torch = pytest.importorskip("torch")

# (class name, constructor args, constructor kwargs, input shape, real class name, inferred attribute)
CASES = [
    ("LazyLinear", (3,), {}, (6, 5), "Linear", "in_features"),
    ("LazyLinear", (3,), {"bias": False}, (6, 4, 5), "Linear", "in_features"),
    ("LazyConv1d", (4, 3), {"padding": 1}, (6, 2, 7), "Conv1d", "in_channels"),
    ("LazyConv2d", (4, 3), {"stride": 2, "groups": 2}, (6, 2, 7, 6), "Conv2d", "in_channels"),
    ("LazyConv3d", (2, 2), {}, (6, 3, 4, 4, 3), "Conv3d", "in_channels"),
    ("LazyConvTranspose1d", (4, 3), {"stride": 2}, (6, 2, 5), "ConvTranspose1d", "in_channels"),
    ("LazyConvTranspose2d", (2, 3), {"output_padding": 1, "stride": 2}, (6, 3, 4, 5), "ConvTranspose2d",
     "in_channels"),
    ("LazyConvTranspose3d", (2, 2), {"bias": False}, (6, 2, 3, 3, 2), "ConvTranspose3d", "in_channels"),
    ("LazyBatchNorm1d", (), {}, (6, 3, 5), "BatchNorm1d", "num_features"),
    ("LazyBatchNorm2d", (), {"momentum": 0.3}, (6, 3, 4, 4), "BatchNorm2d", "num_features"),
    ("LazyBatchNorm3d", (), {"affine": False}, (6, 2, 3, 3, 2), "BatchNorm3d", "num_features"),
    ("LazyInstanceNorm1d", (), {}, (6, 3, 5), "InstanceNorm1d", "num_features"),
    ("LazyInstanceNorm2d", (), {"track_running_stats": False}, (6, 3, 4, 4), "InstanceNorm2d", "num_features"),
    ("LazyInstanceNorm3d", (), {"affine": False, "track_running_stats": False}, (6, 2, 3, 3, 2),
     "InstanceNorm3d", "num_features"),
]
CHUNKINGS = {"one": 6, "even": 3, "uneven": 4}


def _ids(cases):
    return [f"{c[0]}-{i}" for i, c in enumerate(cases)]


@pytest.mark.filterwarnings("ignore:input's size at dim=1 does not match num_features")
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("name,args,kwargs,shape,real,attr", CASES, ids=_ids(CASES))
def test_first_forward_makes_the_real_module_whose_outputs_and_gradients_equal_torchs(name, args, kwargs, shape,
                                                                                       real, attr, chunking):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = getattr(nn, name)(*args, **kwargs).double()
    assert repr(ours) == repr(theirs)
    with torch.no_grad():
        theirs(torch.from_numpy(x))
    ours(dg.from_array(x, chunks=(CHUNKINGS[chunking],) + shape[1:]))
    assert type(ours) is getattr(nn, real) and type(theirs) is getattr(torch.nn, real)
    # as torch's, nothing is inferred when nothing is lazy (an InstanceNorm without affine nor running stats)
    inferred = shape[-1 if attr == "in_features" else 1] if kwargs.get("affine", True) or \
        kwargs.get("track_running_stats", True) else 0
    assert getattr(ours, attr) == getattr(theirs, attr) == inferred
    assert repr(ours) == repr(theirs)
    assert not hasattr(ours, "_initialize_hook")
    assert all(type(p) is nn.Parameter and p.dtype == np.float64 for p in ours.parameters())
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    ours.load_state_dict({k: v.numpy().copy() for k, v in theirs.state_dict().items()})
    t_in = torch.from_numpy(x).requires_grad_(True)
    d_in = dg.from_array(x, chunks=(CHUNKINGS[chunking],) + shape[1:]).requires_grad_(True)
    t_out, d_out = theirs(t_in), ours(d_in)
    w = rng.standard_normal(tuple(t_out.shape))
    (t_out * torch.from_numpy(w)).sum().backward()
    (d_out * dg.from_array(w)).sum().backward()
    pairs = [(d_out, t_out), (d_in.grad, t_in.grad)]
    ours_params = dict(ours.named_parameters())
    pairs += [(ours_params[k].grad, p.grad) for k, p in theirs.named_parameters()]
    ours_buffers = dict(ours.named_buffers())
    pairs += [(ours_buffers[k], b) for k, b in theirs.named_buffers()]
    values = dg.compute(*[d.detach() for d, _ in pairs])
    for value, (_, t) in zip(values, pairs):
        np.testing.assert_allclose(value, t.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_materialized_parameters_get_the_real_modules_initialisation():
    lin = nn.LazyLinear(4)
    lin(dg.ones(2, 25))
    w = lin.weight.detach().numpy()
    assert w.shape == (4, 25) and 0 < np.abs(w).max() <= 1 / 5 and np.unique(w).size == w.size
    bn = nn.LazyBatchNorm1d()
    bn.eval()(dg.ones(2, 3))
    np.testing.assert_array_equal(bn.weight.detach().numpy(), np.ones(3))
    np.testing.assert_array_equal(bn.bias.detach().numpy(), np.zeros(3))
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(3))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3))
    assert type(bn.running_mean) is dg.Tensor


@pytest.mark.parametrize("name,args,kwargs", [(c[0], c[1], c[2]) for c in CASES],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_an_uninitialized_module_has_torchs_repr_state_dict_and_flags(name, args, kwargs):
    theirs, ours = getattr(torch.nn, name)(*args, **kwargs), getattr(nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert ours.has_uninitialized_params() == theirs.has_uninitialized_params()
    t_state, d_state = theirs.state_dict(), ours.state_dict()
    assert list(d_state) == list(t_state)
    assert [repr(v) for k, v in d_state.items() if k != "num_batches_tracked"] == \
        [repr(v) for k, v in t_state.items() if k != "num_batches_tracked"]
    assert [type(p).__name__ for p in ours.parameters()] == [type(p).__name__ for p in theirs.parameters()]
    assert [type(b).__name__ for b in ours.buffers()] == [type(b).__name__ for b in theirs.buffers()]


def test_uninitialized_parameter_and_buffer_are_torchs():
    for cls in ("UninitializedParameter", "UninitializedBuffer"):
        t, d = getattr(torch.nn.parameter, cls)(), getattr(nn.parameter, cls)()
        assert repr(d) == repr(t) == f"<{cls}>"
        assert d.requires_grad == t.requires_grad
        assert nn.parameter.is_lazy(d) and torch.nn.parameter.is_lazy(t)
        with pytest.raises(RuntimeError) as t_err:
            t.shape
        with pytest.raises(RuntimeError) as d_err:
            d.shape
        assert str(d_err.value) == str(t_err.value)
        t.materialize((2, 3), dtype=torch.float64)
        d.materialize((2, 3), dtype="float64")
        assert type(d).__name__ == type(t).__name__ and d.shape == tuple(t.shape) and d.dtype == np.float64
        assert not nn.parameter.is_lazy(d)
    p = nn.parameter.UninitializedParameter(dtype="float64")
    p.materialize((4,))
    assert type(p) is nn.Parameter and p.dtype == np.float64 and p.requires_grad


def test_double_keeps_a_lazy_module_uninitialized_in_float64():
    m = nn.LazyBatchNorm1d().double()
    assert m.has_uninitialized_params() and type(m.weight) is nn.parameter.UninitializedParameter
    assert m.weight.dtype == m.running_mean.dtype == np.float64
    assert repr(m.running_mean) == "<UninitializedBuffer>"
    m(dg.ones(2, 3, dtype="float64"))
    assert type(m) is nn.BatchNorm1d and m.running_var.dtype == np.float64 and m.running_var.shape == (3,)


def test_a_lazy_module_loads_an_initialized_state_and_stays_lazy_until_forward():
    theirs, ours = torch.nn.LazyLinear(3).double(), nn.LazyLinear(3).double()
    src = torch.nn.Linear(5, 3).double()
    theirs.load_state_dict(src.state_dict())
    ours.load_state_dict({k: v.numpy().copy() for k, v in src.state_dict().items()})
    assert type(ours) is nn.LazyLinear and type(theirs) is torch.nn.LazyLinear
    assert repr(ours) == repr(theirs)  # in_features stays 0 until the forward
    assert not ours.has_uninitialized_params() and type(ours.weight) is nn.Parameter
    x = np.arange(10.0).reshape(2, 5)
    np.testing.assert_allclose(ours(dg.from_array(x)).detach().numpy(), theirs(torch.from_numpy(x)).detach().numpy())
    theirs(torch.from_numpy(x))
    assert type(ours) is nn.Linear and repr(ours) == repr(theirs)  # LazyLinear alone reads in_features then
    conv_t, conv_d = torch.nn.LazyConv1d(4, 3), nn.LazyConv1d(4, 3)
    state = torch.nn.Conv1d(2, 4, 3).state_dict()
    conv_t.load_state_dict(state)
    conv_d.load_state_dict({k: v.numpy().copy() for k, v in state.items()})
    conv_t(torch.ones(1, 2, 5))
    conv_d(dg.ones(1, 2, 5))
    assert type(conv_d) is nn.Conv1d and repr(conv_d) == repr(conv_t)


def test_a_lazy_state_loads_into_a_lazy_module_and_not_into_an_initialized_one():
    ours = nn.LazyLinear(3)
    assert ours.load_state_dict(nn.LazyLinear(3).state_dict()) == ([], [])
    assert ours.has_uninitialized_params()
    with pytest.raises(RuntimeError) as t_err:
        torch.nn.Linear(5, 3).load_state_dict(torch.nn.LazyLinear(3).state_dict())
    with pytest.raises(RuntimeError) as d_err:
        nn.Linear(5, 3).load_state_dict(nn.LazyLinear(3).state_dict())
    assert str(d_err.value) == str(t_err.value)


def test_a_lazy_child_in_a_model_is_materialized_by_the_models_first_forward():
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(2))
    reference = torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU(), torch.nn.LazyLinear(2))
    assert repr(model) == repr(reference)
    assert list(model.state_dict()) == list(reference.state_dict())
    model(dg.ones(3, 7))
    reference(torch.ones(3, 7))
    assert repr(model) == repr(reference)
    assert [p.shape for p in model.parameters()] == [tuple(p.shape) for p in reference.parameters()]


def test_initialize_parameters_materializes_without_the_class_switch():
    theirs, ours = torch.nn.LazyConv2d(4, 3), nn.LazyConv2d(4, 3)
    theirs.initialize_parameters(torch.ones(2, 5, 6, 6))
    ours.initialize_parameters(dg.ones(2, 5, 6, 6))
    assert type(ours) is nn.LazyConv2d and repr(ours) == repr(theirs) and ours.weight.shape == (4, 5, 3, 3)


def test_errors_are_torchs():
    def both(make_t, make_d, run_t, run_d):
        with pytest.raises(Exception) as t_err:
            run_t(make_t())
        with pytest.raises(Exception) as d_err:
            run_d(make_d())
        assert type(d_err.value) is type(t_err.value) and str(d_err.value) == str(t_err.value)

    both(lambda: torch.nn.LazyConv2d(4, 3), lambda: nn.LazyConv2d(4, 3),
         lambda m: m(torch.ones(2, 6)), lambda m: m(dg.ones(2, 6)))
    both(lambda: torch.nn.LazyConvTranspose1d(4, 3), lambda: nn.LazyConvTranspose1d(4, 3),
         lambda m: m(torch.ones(2, 3, 4, 5)), lambda m: m(dg.ones(2, 3, 4, 5)))
    both(lambda: torch.nn.LazyLinear(3), lambda: nn.LazyLinear(3),
         lambda m: m.weight.shape, lambda m: m.weight.shape)
    both(lambda: torch.nn.LazyLinear(3), lambda: nn.LazyLinear(3),
         lambda m: m._replicate_for_data_parallel(), lambda m: m._replicate_for_data_parallel())
    state = torch.nn.Linear(4, 3).state_dict()
    both(lambda: torch.nn.LazyLinear(3), lambda: nn.LazyLinear(3),
         lambda m: (m.load_state_dict(state), m(torch.ones(2, 5))),
         lambda m: (m.load_state_dict({k: v.numpy() for k, v in state.items()}), m(dg.ones(2, 5))))

    # a lazy module that does not define initialize_parameters
    torch_lazy = type("Lazy", (torch.nn.modules.lazy.LazyModuleMixin, torch.nn.Module), {})
    our_lazy = type("Lazy", (nn.lazy.LazyModuleMixin, nn.Module), {})
    both(torch_lazy, our_lazy, lambda m: m(torch.ones(2)), lambda m: m(dg.ones(2)))


def test_an_op_on_an_uninitialized_parameter_raises_torch_s_value_error():
    """torch refuses every function on an UninitializedParameter or UninitializedBuffer (ValueError); daskgrad's
    ops on their empty placeholder would have given an empty tensor."""
    for cls in ("UninitializedParameter", "UninitializedBuffer"):
        for m in (torch, dg):
            p = getattr(m.nn.parameter, cls)()
            for op in (lambda: p + 1, lambda: p.exp(), lambda: m.sin(p), lambda: m.nn.functional.relu(p)):
                with pytest.raises(ValueError, match=f"Attempted to use an uninitialized parameter in .*"
                                                     f"`torch.nn.parameter.{cls}` objects"):
                    op()
