"""An in-place write to an input of a composite op (several recorded ops where torch has one) before
the backward: torch's op saved the input, so its backward raises "modified by an inplace operation";
daskgrad's composition saves values made from the input, snapshots no write reaches, so it silently
gave the gradient of the old value until each composite guarded its inputs (``daskgrad.graph.guard``).
Each case against torch, over several chunkings; in-place forms (``x.sinc_()``,
``F.elu(x, inplace=True)``) write their own input and must not raise."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

X = np.array([[0.0, -1.5, 2.0], [0.7, -0.2, 3.0]])
INDEX = np.array([[0, 1, 2], [2, 1, 0]])
SIGNS = np.array([[1.0, -1.0, -1.0], [1.0, 1.0, -1.0]])
CHUNKINGS = [(2, 3), (1, 2)]  # one chunk; uneven chunks


def _recurrent(m, name, *args, **kwargs):
    """``m.nn.<name>`` in float64 with the same fixed weights in torch's and daskgrad's."""
    module = getattr(m.nn, name)(*args, **kwargs).double()
    module.load_state_dict({k: m.tensor(np.cos(np.arange(v.numel()) + i).reshape(tuple(v.shape)) / 2)
                            for i, (k, v) in enumerate(module.state_dict().items())})
    return module

# name -> f(module, F, x): torch's op saves x (raises after a write of x), daskgrad's is a composition
SAVES_INPUT = {
    "sinc": lambda m, F, x: x.sinc(),
    "sgn": lambda m, F, x: x.sgn(),
    "angle": lambda m, F, x: x.angle(),
    "cummax": lambda m, F, x: x.cummax(1)[0],
    "cummin": lambda m, F, x: x.cummin(1)[0],
    "gather": lambda m, F, x: x.gather(1, m.tensor(INDEX)),
    "dist": lambda m, F, x: x.dist(x * 2),
    "xlogy": lambda m, F, x: x.xlogy(x.abs() + 1),
    "nansum": lambda m, F, x: x.nansum(),
    "nanmean": lambda m, F, x: x.nanmean(),
    "elu": lambda m, F, x: F.elu(x),
    "celu": lambda m, F, x: F.celu(x),
    "gelu": lambda m, F, x: F.gelu(x),
    "gelu_tanh": lambda m, F, x: F.gelu(x, approximate="tanh"),
    "leaky_relu": lambda m, F, x: F.leaky_relu(x),
    "layer_norm": lambda m, F, x: F.layer_norm(x, (3,)),
    "hardtanh": lambda m, F, x: F.hardtanh(x),
    "relu6": lambda m, F, x: F.relu6(x),
    "threshold": lambda m, F, x: F.threshold(x, 0.5, 2.0),
    "smooth_l1_loss": lambda m, F, x: F.smooth_l1_loss(x, x * 0.5),
    "huber_loss": lambda m, F, x: F.huber_loss(x, x * 0.5),
    "silu": lambda m, F, x: F.silu(x),
    "selu": lambda m, F, x: F.selu(x),
    "softplus": lambda m, F, x: F.softplus(x, beta=2.0, threshold=3.0),
    "mish": lambda m, F, x: F.mish(x),
    "hardswish": lambda m, F, x: F.hardswish(x),
    "hardsigmoid": lambda m, F, x: F.hardsigmoid(x),
    "logsigmoid": lambda m, F, x: F.logsigmoid(x),
    "softshrink": lambda m, F, x: F.softshrink(x),
    "hardshrink": lambda m, F, x: F.hardshrink(x),
    "prelu": lambda m, F, x: F.prelu(x, m.tensor([0.25], dtype=x.dtype)),
    "glu": lambda m, F, x: F.glu(x, 0),
    "div_trunc": lambda m, F, x: x.div(x.abs() + 1, rounding_mode="trunc"),
    "div_floor_divisor": lambda m, F, x: m.ones(2, 3, dtype=x.dtype).div(x.abs() + 1, rounding_mode="floor") * x,
    "fmax": lambda m, F, x: x.fmax(x * 0.5),
    "fmin": lambda m, F, x: (x * 0.5).fmin(x),
    "ldexp_exponent": lambda m, F, x: (x * 0.5).ldexp(x),
    "nan_to_num": lambda m, F, x: x.nan_to_num(),
    "take": lambda m, F, x: x.take(m.tensor([0, 4, 5])),
    "take_along_dim": lambda m, F, x: x.take_along_dim(m.tensor(INDEX), 1),
    "masked_select": lambda m, F, x: x.masked_select(m.tensor([True, False, True])),
    "index_add_source": lambda m, F, x: m.zeros(2, 3, dtype=x.dtype).index_add(1, m.tensor([0, 2, 1]), x),
    "index_copy_source": lambda m, F, x: m.zeros(2, 3, dtype=x.dtype).index_copy(1, m.tensor([0, 2, 1]), x),
    "conv1d_input": lambda m, F, x: F.conv1d(x.reshape(1, 2, 3), m.ones(1, 2, 2, dtype=x.dtype)),
    "conv1d_weight": lambda m, F, x: F.conv1d(m.ones(1, 2, 5, dtype=x.dtype), x.reshape(1, 2, 3)),
    "conv2d_input": lambda m, F, x: F.conv2d(x.reshape(1, 1, 2, 3), m.ones(1, 1, 2, 2, dtype=x.dtype)),
    "avg_pool1d": lambda m, F, x: F.avg_pool1d(x.reshape(1, 2, 3), 2),
    "adaptive_avg_pool1d": lambda m, F, x: F.adaptive_avg_pool1d(x.reshape(1, 2, 3), 2),
    "batch_norm": lambda m, F, x: F.batch_norm(x, None, None, training=True),
    "batch_norm_weight": lambda m, F, x: F.batch_norm(m.ones(4, 3, dtype=x.dtype), None, None, x[0],
                                                      training=True) * m.arange(12.0, dtype=x.dtype).reshape(4, 3),
    "group_norm": lambda m, F, x: F.group_norm(x.reshape(2, 3, 1), 1) * m.arange(6.0, dtype=x.dtype).reshape(2, 3, 1),
    "nll_loss": lambda m, F, x: F.nll_loss(x, m.tensor([0, 2])),
    "kl_div": lambda m, F, x: F.kl_div(x, x.abs() * 0.5, reduction="sum"),
    "poisson_nll_loss": lambda m, F, x: F.poisson_nll_loss(x, x * 0.5),
    "soft_margin_loss": lambda m, F, x: F.soft_margin_loss(x, m.tensor(SIGNS)),
    "multilabel_soft_margin_loss": lambda m, F, x: F.multilabel_soft_margin_loss(x, x * 0.5),
    "cosine_embedding_loss": lambda m, F, x: F.cosine_embedding_loss(x, x * 2, m.tensor([1.0, -1.0])),
    "cosine_similarity": lambda m, F, x: F.cosine_similarity(x, x * 2 + 1),
    # the recurrent layers' input projection (torch's mm saves the input): a batch of 2 rows, or 2 steps
    "rnn_cell": lambda m, F, x: _recurrent(m, "RNNCell", 3, 2)(x),
    "lstm_cell": lambda m, F, x: _recurrent(m, "LSTMCell", 3, 2)(x)[1],
    "gru_cell": lambda m, F, x: _recurrent(m, "GRUCell", 3, 2)(x),
    "lstm": lambda m, F, x: _recurrent(m, "LSTM", 3, 2, proj_size=1)(x)[0],
    "gru_bidirectional": lambda m, F, x: _recurrent(m, "GRU", 3, 2, bidirectional=True)(x)[1],
    "pad_reflect": lambda m, F, x: F.pad(x, (2, 1), mode="reflect"),
    "pad_replicate": lambda m, F, x: F.pad(x, (2, 1), mode="replicate"),
    "instance_norm": lambda m, F, x: F.instance_norm(x[None], weight=m.tensor([2.0, 0.5], dtype=x.dtype)),
    "local_response_norm": lambda m, F, x: F.local_response_norm(x[None], 2),
}
# torch computes after the write (its op saves no view of x)
SAVES_NO_INPUT = {
    "sgn_of_a_complex_made_from_x": lambda m, F, x: (x * (1 + 1j)).sgn().real,
    "l1_loss": lambda m, F, x: F.l1_loss(x, x * 0.5),
    "smooth_l1_loss_beta0": lambda m, F, x: F.smooth_l1_loss(x, x * 0.5, beta=0.0),
    "ldexp_exponent_of_a_constant": lambda m, F, x: m.ones(2, 3, dtype=x.dtype).ldexp(x),
    "ldexp_mantissa": lambda m, F, x: x.ldexp(x * 0.5),  # (LdexpBackward0 saves the exponent and the result)
    "sort": lambda m, F, x: x.sort(1).values * m.tensor([1.0, 2.0, 3.0], dtype=x.dtype),  # (the indices, not x)
    "quantile": lambda m, F, x: m.quantile(x, 0.3, 1) * m.tensor([1.0, 2.0], dtype=x.dtype),
    "median_of_all": lambda m, F, x: m.quantile(x, 0.5) * 2,
    "tanhshrink": lambda m, F, x: F.tanhshrink(x),
    "softmin": lambda m, F, x: F.softmin(x, 1) * m.tensor([1.0, 2.0, 3.0], dtype=x.dtype),
    "kl_div_log_target": lambda m, F, x: F.kl_div(x, x * 0.5, reduction="sum", log_target=True),
    "gaussian_nll_loss": lambda m, F, x: F.gaussian_nll_loss(x, x * 0.5, x * 0.5 + 2),
    "margin_ranking_loss": lambda m, F, x: F.margin_ranking_loss(x, x * 0.5, m.tensor(SIGNS)),
    "hinge_embedding_loss": lambda m, F, x: F.hinge_embedding_loss(x, m.tensor(SIGNS)),
    "triplet_margin_loss": lambda m, F, x: F.triplet_margin_loss(x, x * 0.5, x * 2 - 1),
    "pairwise_distance": lambda m, F, x: F.pairwise_distance(x, x * 0.5),
    "pad_constant": lambda m, F, x: F.pad(x, (2, 1), value=1.5) ** 2,
    "pad_circular": lambda m, F, x: F.pad(x, (2, 1), mode="circular") ** 2,
    "pixel_shuffle": lambda m, F, x: F.pixel_shuffle(x[:, 1:].reshape(1, 4, 1, 1), 2) ** 2,
    "pixel_unshuffle": lambda m, F, x: F.pixel_unshuffle(x[:, 1:].reshape(1, 1, 2, 2), 2) ** 2,
    "interpolate_linear": lambda m, F, x: F.interpolate(x[None], scale_factor=1.5, mode="linear") ** 2,
}
# in-place forms: they write their own input, and give torch's gradient
INPLACE = {
    "sinc_": lambda m, F, x: x.sinc_(),
    "sgn_": lambda m, F, x: x.sgn_(),
    "elu_inplace": lambda m, F, x: F.elu(x, inplace=True),
    "celu_inplace": lambda m, F, x: F.celu(x, inplace=True),
    "hardtanh_inplace": lambda m, F, x: F.hardtanh(x, inplace=True),
    "threshold_inplace": lambda m, F, x: F.threshold(x, 0.5, 2.0, inplace=True),
    "selu_inplace": lambda m, F, x: F.selu(x, inplace=True),
    "hardswish_inplace": lambda m, F, x: F.hardswish(x, inplace=True),
}


def _run(m, f, chunks, write_after):
    """``f`` of a non-leaf copy of X, that copy then written in place (or not), then backward: the
    leaf's gradient, or the error raised."""
    F = m.nn.functional
    if m is torch:
        leaf = torch.tensor(X, requires_grad=True)
    else:
        leaf = dg.tensor(X, requires_grad=True, chunks=chunks)
    x = leaf * 1.0
    y = f(m, F, x)
    if write_after:
        with m.no_grad():
            x.add_(1.0)
    try:
        y.sum().backward()
    except RuntimeError as e:
        return e
    return leaf.grad.detach().numpy(force=True) if m is torch else leaf.grad.numpy()


@pytest.mark.parametrize("chunks", CHUNKINGS[1:])
@pytest.mark.parametrize("name", sorted(SAVES_INPUT))
def test_a_write_of_an_input_torch_saved_makes_the_backward_raise(name, chunks):
    theirs = _run(torch, SAVES_INPUT[name], None, True)
    assert isinstance(theirs, RuntimeError) and "modified by an inplace operation" in str(theirs)
    ours = _run(dg, SAVES_INPUT[name], chunks, True)
    assert isinstance(ours, RuntimeError), f"{name}: a gradient {ours} where torch raises"
    assert "one of the variables needed for gradient computation has been modified by an inplace operation" in str(ours)
    assert "is at version 1; expected version 0 instead" in str(ours)


@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("name", sorted(SAVES_INPUT) + sorted(SAVES_NO_INPUT) + sorted(INPLACE))
def test_without_a_later_write_the_gradient_is_torch_s(name, chunks):
    f = {**SAVES_INPUT, **SAVES_NO_INPUT, **INPLACE}[name]
    theirs, ours = _run(torch, f, None, False), _run(dg, f, chunks, False)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("name", sorted(SAVES_NO_INPUT))
def test_a_write_of_an_input_torch_did_not_save_leaves_the_gradient(name, chunks):
    theirs = _run(torch, SAVES_NO_INPUT[name], None, True)  # (not kron: torch's reads the written values)
    assert not isinstance(theirs, Exception)
    np.testing.assert_allclose(_run(dg, SAVES_NO_INPUT[name], chunks, True), theirs, rtol=1e-12, atol=1e-14)


def test_copying_a_composite_s_result_into_its_input_raises_as_torch_s():
    """``x.copy_(F.elu(x))`` is a later write of the input elu saved (torch raises); ``F.elu(x, inplace=True)``
    is elu's own write (torch's elu_ saves its result)."""
    for m in (torch, dg):
        leaf = m.tensor(X, requires_grad=True)
        x = leaf * 1.0
        x.copy_(m.nn.functional.elu(x))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            x.sum().backward()


def test_a_guard_holds_no_value_and_goes_with_the_graph():
    """The guard keeps the input's version, not its value; a released graph keeps no guard."""
    x = dg.tensor(X, requires_grad=True) * 1.0
    y = x.sgn()  # (an op of several ops: sinc was one, until it became one op with torch's gradient)
    (guard,) = y.grad_fn._guards
    assert guard.value is None and guard.version == 0
    y.sum().backward()
    assert y.grad_fn._guards == ()
