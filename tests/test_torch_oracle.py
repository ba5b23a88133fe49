"""Optional cross-check against PyTorch (skips when torch is not installed)."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

CASES = {
    "mlp": (lambda m, x, w1, w2: m.log_softmax(m.relu(x @ w1) @ w2, 1).sum(), [(6, 4), (4, 5), (5, 3)]),
    "norm_chain": (lambda m, x, y: (m.tanh(x) * m.sigmoid(y)).sum() / (x * x).sum().sqrt(), [(6, 4), (6, 4)]),
    "reductions": (lambda m, x: m.logsumexp(x, 1).sum() + m.amax(x, 0).sum() + x.prod(), [(6, 4)]),
    "indexing": (lambda m, x: (x[1:5, ::2] ** 2).sum() + x[[0, 2, 2]].sum() * 3, [(6, 4)]),
    "cross_entropy": (lambda m, x: m.cross_entropy(x, m.target), [(6, 4)]),
    "mse_bce": (lambda m, x, y: m.mse_loss(x, y) + m.bce(x, m.sigmoid(y)), [(6, 4), (6, 4)]),
}


class _Torch:
    relu, tanh, sigmoid = torch.relu, torch.tanh, torch.sigmoid
    log_softmax = staticmethod(lambda t, a: torch.log_softmax(t, a))
    logsumexp = staticmethod(lambda t, a: torch.logsumexp(t, a))
    amax = staticmethod(lambda t, a: torch.amax(t, a))
    cross_entropy = staticmethod(torch.nn.functional.cross_entropy)
    mse_loss = staticmethod(torch.nn.functional.mse_loss)
    bce = staticmethod(torch.nn.functional.binary_cross_entropy_with_logits)
    target = torch.tensor([0, 3, 1, 1, 2, 0])


class _Dg:
    relu, tanh, sigmoid = dg.relu, dg.tanh, dg.sigmoid
    log_softmax = staticmethod(lambda t, a: dg.log_softmax(t, axis=a))
    logsumexp = staticmethod(lambda t, a: dg.logsumexp(t, axis=a))
    amax = staticmethod(lambda t, a: dg.amax(t, axis=a))
    cross_entropy = staticmethod(dg.cross_entropy)
    mse_loss = staticmethod(dg.mse_loss)
    bce = staticmethod(dg.binary_cross_entropy_with_logits)
    target = dg.tensor(np.array([0, 3, 1, 1, 2, 0]))


@pytest.mark.parametrize("name", list(CASES))
def test_values_and_gradients_match_pytorch(name):
    fn, shapes = CASES[name]
    rng = np.random.default_rng(3)
    values = [rng.uniform(0.2, 1.5, s) * rng.choice([-1, 1], s) for s in shapes]
    tts = [torch.tensor(v, requires_grad=True) for v in values]
    dts = [dg.from_array(v, chunks=tuple(max(1, n // 2) for n in v.shape), requires_grad=True) for v in values]
    out_t, out_d = fn(_Torch, *tts), fn(_Dg, *dts)
    out_t.backward()
    out_d.backward()
    np.testing.assert_allclose(out_d.detach().item(), out_t.item(), rtol=1e-10)
    for t, d in zip(tts, dts):
        np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-7, atol=1e-12)


def test_tie_and_kink_conventions_match_pytorch():
    v = np.array([1.0, 3.0, 3.0, 0.0, -2.0, 3.0])
    t = torch.tensor(v, requires_grad=True)
    d = dg.from_array(v, chunks=2, requires_grad=True)
    f_t = (t.max() + torch.relu(t).sum() + t.abs().sum() + torch.clamp(t, 0.0, 3.0).sum()
           + torch.maximum(t, t.flip(0)).sum())
    f_d = d.max() + dg.relu(d).sum() + dg.abs(d).sum() + dg.clip(d, 0.0, 3.0).sum() + dg.maximum(d, dg.flip(d, 0)).sum()
    f_t.backward()
    f_d.backward()
    np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy())


def test_sigmoid_and_bce_at_extreme_logits_match_pytorch_without_warnings():
    """torch's sigmoid is ``1 / (1 + exp(-x))``: 0 where exp overflows, quietly; the loss and its
    gradient from logits stay finite over float32's whole range."""
    import warnings

    v = np.array([-1e4, -200.0, -90.0, -88.0, -30.0, -1e-8, 0.0, 1e-8, 30.0, 90.0, 1e4], dtype=np.float32)
    y = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0], dtype=np.float32)
    t = torch.tensor(v, requires_grad=True)
    loss_t = torch.nn.functional.binary_cross_entropy_with_logits(t, torch.tensor(y)) + torch.sigmoid(t).sum()
    loss_t.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = dg.from_array(v, chunks=4, requires_grad=True)
        loss_d = dg.binary_cross_entropy_with_logits(d, dg.from_array(y, chunks=4)) + dg.sigmoid(d).sum()
        loss_d.backward()
        np.testing.assert_allclose(dg.sigmoid(d).detach().numpy(), torch.sigmoid(t).detach().numpy(),
                                   rtol=2e-7, atol=0)
        np.testing.assert_allclose(loss_d.item(), loss_t.item(), rtol=1e-6)
        np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-12)
