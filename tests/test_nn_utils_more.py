"""torch.nn.utils' parameters_to_vector / vector_to_parameters, fusion, rnn.pad_sequence, the deprecated
clip_grad_norm and stateless.functional_call, against torch 2.13 (values, gradients, warnings, errors)."""
import re
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def _np(t):
    return t.detach().numpy()


def _pair(make):
    """The same module in torch and daskgrad, float64, with torch's initial values."""
    t = make(torch).double()
    d = make(dg)
    d.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return t, d


def test_parameters_to_vector_and_back():
    t, d = _pair(lambda m: m.nn.Linear(3, 2, dtype=m.float64))
    vt, vd = torch.nn.utils.parameters_to_vector(t.parameters()), dg.nn.utils.parameters_to_vector(d.parameters())
    np.testing.assert_array_equal(_np(vd), _np(vt))
    assert vd.grad_fn is not None
    (vd * vd).sum().backward()
    (vt * vt).sum().backward()
    np.testing.assert_allclose(_np(d.weight.grad), _np(t.weight.grad))
    new = np.arange(8.0)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), t.parameters())
    dg.nn.utils.vector_to_parameters(dg.tensor(new, chunks=3), d.parameters())
    for k in ("weight", "bias"):
        np.testing.assert_array_equal(_np(getattr(d, k)), _np(getattr(t, k)))
        assert isinstance(getattr(d, k), dg.nn.Parameter) and getattr(d, k).grad_fn is None
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        torch.nn.utils.vector_to_parameters([1.0], t.parameters())
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        dg.nn.utils.vector_to_parameters([1.0], d.parameters())


def test_clip_grad_norm_is_clip_grad_norm_with_torch_s_warning():
    for m in (torch, dg):
        p = m.nn.Parameter(m.tensor(np.array([3.0, 4.0])))
        p.grad = m.tensor(np.array([3.0, 4.0]))
        with pytest.warns(FutureWarning, match=re.escape("`torch.nn.utils.clip_grad_norm` is now deprecated")):
            total = m.nn.utils.clip_grad_norm([p], 1.0)
        assert float(total) == 5.0
        np.testing.assert_allclose(_np(p.grad), [0.6, 0.8], rtol=1e-6)


@pytest.mark.parametrize("transpose", [False, True])
def test_fuse_conv_bn_eval_gives_the_same_outputs_as_torch_s(transpose):
    rng = np.random.default_rng(0)
    conv_cls = "ConvTranspose2d" if transpose else "Conv2d"
    state = {"weight": rng.standard_normal((3, 4, 2, 2) if transpose else (4, 3, 2, 2)), "bias": rng.standard_normal(4)}
    outs = []
    for m in (torch, dg):
        conv = getattr(m.nn, conv_cls)(3, 4, 2, dtype=m.float64)
        bn = m.nn.BatchNorm2d(4, dtype=m.float64)
        conv.load_state_dict({k: m.tensor(v) for k, v in state.items()})
        bn.load_state_dict({"weight": m.tensor(np.array([1.0, 2.0, 0.5, -1.0])), "bias": m.tensor(np.arange(4.0)),
                            "running_mean": m.tensor(np.array([0.1, -0.2, 0.3, 0.0])),
                            "running_var": m.tensor(np.array([1.0, 0.5, 2.0, 4.0])),
                            "num_batches_tracked": m.tensor(3)})
        with pytest.raises(AssertionError, match="Fusion only for eval!"):
            m.nn.utils.fuse_conv_bn_eval(conv, bn, transpose=transpose)
        conv.eval()
        bn.eval()
        fused = m.nn.utils.fuse_conv_bn_eval(conv, bn, transpose=transpose)
        x = m.tensor(np.cos(np.arange(2 * 3 * 5 * 5.0)).reshape(2, 3, 5, 5))
        np.testing.assert_allclose(_np(fused(x)), _np(bn(conv(x))), rtol=1e-12, atol=1e-12)
        assert isinstance(fused.weight, m.nn.Parameter) and fused.weight is not conv.weight
        outs.append((_np(fused.weight), _np(fused.bias)))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_fuse_linear_bn_eval_gives_the_same_outputs_as_torch_s():
    outs = []
    for m in (torch, dg):
        lin, bn = m.nn.Linear(3, 4, dtype=m.float64), m.nn.BatchNorm1d(4, dtype=m.float64)
        lin.load_state_dict({"weight": m.tensor(np.arange(12.0).reshape(4, 3) / 7), "bias": m.tensor(np.ones(4))})
        bn.load_state_dict({"weight": m.tensor(np.array([1.0, 2.0, 0.5, -1.0])), "bias": m.tensor(np.arange(4.0)),
                            "running_mean": m.tensor(np.array([0.1, -0.2, 0.3, 0.0])),
                            "running_var": m.tensor(np.array([1.0, 0.5, 2.0, 4.0])),
                            "num_batches_tracked": m.tensor(3)})
        lin.eval()
        bn.eval()
        fused = m.nn.utils.fuse_linear_bn_eval(lin, bn)
        x = m.tensor(np.sin(np.arange(6.0)).reshape(2, 3))
        np.testing.assert_allclose(_np(fused(x)), _np(bn(lin(x))), rtol=1e-12, atol=1e-12)
        outs.append((_np(fused.weight), _np(fused.bias)))
        with pytest.raises(AssertionError, match=re.escape("To fuse, linear.out_features == bn.num_features")):
            m.nn.utils.fuse_linear_bn_eval(lin, m.nn.BatchNorm1d(3, dtype=m.float64).eval())
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-14)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_is_torch_s(batch_first, side):
    lengths = (3, 1, 4)
    seqs = [np.arange(n * 2.0).reshape(n, 2) + 10 * i for i, n in enumerate(lengths)]
    theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(s, requires_grad=True) for s in seqs], batch_first,
                                             -1.5, side)
    leaves = [dg.tensor(s, chunks=(2, 2), requires_grad=True) for s in seqs]
    ours = dg.nn.utils.rnn.pad_sequence(leaves, batch_first, -1.5, side)
    np.testing.assert_array_equal(_np(ours), _np(theirs))
    (ours * ours).sum().backward()
    for leaf, s in zip(leaves, seqs):
        np.testing.assert_array_equal(_np(leaf.grad), 2 * s)
    ints = dg.nn.utils.rnn.pad_sequence([dg.tensor([1, 2]), dg.tensor([3])], padding_value=-1.5)
    np.testing.assert_array_equal(ints.numpy(), torch.nn.utils.rnn.pad_sequence(
        [torch.tensor([1, 2]), torch.tensor([3])], padding_value=-1.5).numpy())
    assert ints.dtype == dg.int64


def test_pad_sequence_errors_are_torch_s():
    a, b = np.ones((3, 2)), np.ones((2, 3))
    for m in (torch, dg):
        pad = m.nn.utils.rnn.pad_sequence
        with pytest.raises(RuntimeError, match="received an empty list of sequences"):
            pad([])
        with pytest.raises(RuntimeError, match=re.escape("The size of tensor a (2) must match the size of tensor b "
                                                         "(3) at non-singleton dimension 1")):
            pad([m.tensor(a), m.tensor(b)])
        with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right, but got up."):
            pad([m.tensor(a)], False, 0.0, "up")
        with pytest.raises(RuntimeError, match="Expected iterable for input sequences, but got arg of type"):
            pad(3)


def test_stateless_functional_call_warns_and_calls():
    t, d = _pair(lambda m: m.nn.Linear(3, 2, dtype=m.float64))
    W, x = np.arange(6.0).reshape(2, 3), np.array([1.0, -1.0, 2.0])
    outs = []
    for m, mod in ((torch, t), (dg, d)):
        with pytest.warns(FutureWarning, match="stateless.functional_call` is deprecated as of PyTorch 2.0"):
            outs.append(_np(m.nn.utils.stateless.functional_call(mod, {"weight": m.tensor(W)}, (m.tensor(x),))))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dg.func.functional_call(d, {"weight": dg.tensor(W)}, (dg.tensor(x),))


@pytest.mark.parametrize("batch_first", [False, True])
def test_unpad_sequence_undoes_pad_sequence_and_transposes_its_input_in_place_as_torch_s(batch_first):
    lengths = (3, 1, 4)
    seqs = [np.arange(n * 2.0).reshape(n, 2) + 10 * i for i, n in enumerate(lengths)]
    results = []
    for m in (torch, dg):
        leaves = [m.tensor(s, requires_grad=True) for s in seqs]
        padded = m.nn.utils.rnn.pad_sequence(leaves, batch_first)
        out = m.nn.utils.rnn.unpad_sequence(padded, m.tensor(lengths), batch_first)
        assert tuple(padded.shape) == (3, 4, 2)  # (torch's transposes it in place without batch_first)
        sum(((o * o).sum() for o in out), m.tensor(0.0, dtype=m.float64)).backward()
        results.append(([_np(o) for o in out], [_np(leaf.grad) for leaf in leaves]))
        with pytest.raises(ValueError, match="zip\\(\\) argument 2 is shorter than argument 1"):
            m.nn.utils.rnn.unpad_sequence(m.nn.utils.rnn.pad_sequence(leaves, True), m.tensor([3]), True)
    for ours, theirs in zip(*results[::-1]):
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
