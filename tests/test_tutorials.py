"""The PyTorch tutorial examples give PyTorch's numbers."""
import numpy as np
import pytest

import daskgrad as dg


def test_vjp_weights_of_cubed_double_accumulate_and_zero():
    x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    z = (2 * x) ** 3
    for w in ([1.0, 0.1, 0.5], [0.1, 1.0, 2.0]):
        z.backward(dg.tensor(w), retain_graph=True)
        np.testing.assert_allclose(x.grad.numpy(), 24 * np.array([1, 4, 9]) * np.array(w), rtol=1e-6)
        x.grad.zero_()


def test_mean_of_cubed_double_on_2x2():
    x = dg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    ((2 * x) ** 3).mean().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.array([[1, 4], [9, 16]]), rtol=1e-6)


def test_doubling_loop_with_norm_then_weighted_backward():
    x = dg.tensor([0.5, -1.2, 0.3], requires_grad=True)
    y = x * 2
    while y.norm() < 1000:
        y = y * 2
    y.backward(dg.tensor([0.1, 1.0, 0.0001]))
    np.testing.assert_allclose(x.grad.numpy(), [102.4, 1024, 0.1024], rtol=1e-6)


def test_matmul_jacobian_rows_with_retain_graph_and_zeroing():
    x = dg.tensor([[2.0, 1.0]], requires_grad=True)
    out = x @ dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    for v, want in (([[1.0, 0.0]], [[1, 3]]), ([[0.0, 1.0]], [[2, 4]]), ([[1.0, 1.0]], [[3, 7]])):
        out.backward(dg.tensor(v), retain_graph=True)
        np.testing.assert_allclose(x.grad.numpy(), want)
        x.grad.zero_()


def _staged():
    x = dg.tensor(3.0, requires_grad=True)
    m = x ** 2
    y = m + x
    return x, 4 * y, 2 * y


def test_staged_graph_with_retain_graph_gives_28_then_14():
    x, p, q = _staged()
    p.backward(retain_graph=True)
    assert x.grad.item() == 28
    x.grad.zero_()
    q.backward()
    assert x.grad.item() == 14


def test_staged_graph_accumulates_to_42_without_zeroing():
    x, p, q = _staged()
    p.backward(retain_graph=True)
    q.backward()
    assert x.grad.item() == 42


def test_staged_graph_without_retain_graph_raises_and_keeps_28():
    x, p, q = _staged()
    p.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        q.backward()
    assert x.grad.item() == 28


def test_leaf_backward_twice_accumulates_to_2():
    x = dg.tensor(1.0, requires_grad=True)
    x.backward()
    x.backward()
    assert x.grad.item() == 2


def test_gentle_intro_q_equals_3a3_minus_b2():
    a = dg.tensor([2.0, 3.0], requires_grad=True)
    b = dg.tensor([6.0, 4.0], requires_grad=True)
    q = 3 * a ** 3 - b ** 2
    q.backward(dg.ones(2))
    np.testing.assert_allclose(a.grad.numpy(), [36, 81])
    np.testing.assert_allclose(b.grad.numpy(), [-12, -8])


def test_eye_plus_one_squared_transposed_accumulates_then_zeroes():
    inp = dg.from_array(np.eye(4, 5), chunks=(2, 3), requires_grad=True)
    out = ((inp + 1) ** 2).T
    out.backward(dg.ones(5, 4, dtype="float64"), retain_graph=True)
    np.testing.assert_allclose(inp.grad.numpy(), 2 * (np.eye(4, 5) + 1))
    out.backward(dg.ones(5, 4, dtype="float64"), retain_graph=True)
    np.testing.assert_allclose(inp.grad.numpy(), 4 * (np.eye(4, 5) + 1))
    inp.grad.zero_()
    out.backward(dg.ones(5, 4, dtype="float64"))
    np.testing.assert_allclose(inp.grad.numpy(), 2 * (np.eye(4, 5) + 1))


def test_detach_stops_tracking_d2l():
    x = dg.arange(4.0, requires_grad=True)
    y = x * x
    u = y.detach()
    (u * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), u.numpy())


def test_blitz_mean_of_3_x_plus_2_squared_is_4_5():
    x = dg.ones(2, 2, requires_grad=True)
    out = (3 * (x + 2) ** 2).mean()
    assert out.detach().item() == pytest.approx(27.0)
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 2), 4.5))
