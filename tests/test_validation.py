"""No silent wrong result: bad axes, indices, labels and shapes raise torch's errors (type and
text) before anything is submitted, and the edge cases of max, pow, boolean masks and in-place
updates give torch's numbers."""
import re
import warnings

import numpy as np
import pytest

import daskgrad as dg


def raises(exc, text):
    return pytest.raises(exc, match="^" + re.escape(text) + "$")


def m23():
    return dg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)


def dim_error(lo, hi, got):
    return raises(IndexError, f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {got})")


# ------------------------------------------------------------------------ axes
@pytest.mark.parametrize("call,got", [
    (lambda x: x.sum(axis=3), 3), (lambda x: x.sum(axis=-3), -3), (lambda x: x.mean(axis=2), 2),
    (lambda x: x.var(axis=2), 2), (lambda x: x.std(axis=(0, 2)), 2), (lambda x: x.max(axis=2), 2),
    (lambda x: x.min(axis=2), 2), (lambda x: x.amax(axis=2), 2), (lambda x: x.amin(axis=-3), -3),
    (lambda x: x.argmax(axis=2), 2), (lambda x: x.argmin(axis=2), 2), (lambda x: x.prod(axis=2), 2),
    (lambda x: x.cumsum(2), 2), (lambda x: x.logsumexp(2), 2), (lambda x: x.norm(axis=2), 2),
    (lambda x: dg.softmax(x, axis=2), 2), (lambda x: dg.log_softmax(x, axis=-3), -3),
    (lambda x: x.squeeze(2), 2), (lambda x: x.flip(2), 2), (lambda x: x.roll(1, 2), 2),
    (lambda x: x.swapaxes(0, 2), 2), (lambda x: dg.moveaxis(x, 2, 0), 2), (lambda x: x.permute(0, 2), 2),
    (lambda x: dg.concatenate([x, x], axis=2), 2), (lambda x: dg.split(x, 1, axis=2), 2),
    (lambda x: dg.diff(x, axis=2), 2), (lambda x: dg.tensordot(x, x, axes=([2], [0])), 2),
])
def test_out_of_range_axis_raises_torchs_index_error_instead_of_wrapping(call, got):
    with dim_error(-2, 1, got):
        call(m23())


def test_axis_ranges_of_ops_that_add_a_dimension_and_of_zero_d_tensors():
    with dim_error(-3, 2, 3):
        m23().unsqueeze(3)
    with dim_error(-3, 2, 4):
        dg.stack([m23(), m23()], axis=4)
    with dim_error(-1, 0, 1):
        dg.tensor(1.0).sum(axis=1)
    assert dg.tensor(2.0).sum(axis=-1).item() == 2.0


def test_duplicate_axes_raise_torchs_error():
    for call, dim in ((lambda x: x.sum(axis=(0, 0)), 0), (lambda x: x.amax(axis=(0, -2)), 0),
                      (lambda x: x.flip((1, 1)), 1)):
        with raises(RuntimeError, f"dim {dim} appears multiple times in the list of dims"):
            call(m23())
    with raises(RuntimeError, "permute(): duplicate dims are not allowed."):
        m23().permute(0, 0)


# --------------------------------------------------------------------- indices
@pytest.mark.parametrize("index,text", [
    (([0, 5],), "index 5 is out of bounds for dimension 0 with size 3"),
    (([0, -4],), "index -4 is out of bounds for dimension 0 with size 3"),
    ((5,), "index 5 is out of bounds for dimension 0 with size 3"),
    ((-4,), "index -4 is out of bounds for dimension 0 with size 3"),
    ((np.array([0, 3]),), "index 3 is out of bounds for dimension 0 with size 3"),
    ((1, -5), "index -5 is out of bounds for dimension 1 with size 4"),
    ((slice(None), [0, 7]), "index 7 is out of bounds for dimension 0 with size 4"),
    ((Ellipsis, 4), "index 4 is out of bounds for dimension 1 with size 4"),
    ((None, 1, 9), "index 9 is out of bounds for dimension 2 with size 4"),
])
def test_out_of_range_index_raises_torchs_index_error_instead_of_wrapping(index, text):
    x = dg.tensor(np.ones((3, 4)), requires_grad=True)
    with raises(IndexError, text):
        x[index]
    y = x.detach().clone()
    with raises(IndexError, text):
        y[index] = 0.0


# ---------------------------------------------------------------------- labels
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("bad", [5, 3, -1])
def test_out_of_range_class_label_raises_and_writes_no_grad(loss, bad):
    z = dg.tensor(np.zeros((2, 3)), requires_grad=True)
    out = getattr(dg, loss)(z, dg.tensor([0, bad]))
    with raises(IndexError, f"Target {bad} is out of bounds."):
        out.detach().item()
    with raises(IndexError, f"Target {bad} is out of bounds."):
        out.backward()
    assert z.grad is None


def test_class_target_checks_on_the_client():
    z = dg.tensor(np.zeros((2, 3)), requires_grad=True)
    with raises(ValueError, "Expected input batch_size (2) to match target batch_size (3)."):
        dg.cross_entropy(z, dg.tensor([0, 1, 2]))
    with raises(RuntimeError, "expected target dtype to be Long or Byte, but got Double"):
        dg.nll_loss(z, dg.tensor(np.array([0.0, 1.0])))
    with raises(RuntimeError, "Expected floating point type for target with class probabilities, got Long"):
        dg.cross_entropy(z, dg.tensor(np.zeros((2, 3), dtype=np.int64)))
    with raises(RuntimeError, "0D or 1D target tensor expected, multi-target not supported"):
        dg.nll_loss(z, dg.tensor([[0, 1]]))


# ---------------------------------------------------------------------- shapes
def test_mse_loss_with_broadcast_target_matches_torch_number_and_warning():
    x = dg.tensor(np.arange(4.0).reshape(4, 1), requires_grad=True)
    with pytest.warns(UserWarning) as w:
        loss = dg.mse_loss(x, dg.tensor([1.0, 2.0, 3.0, 4.0]))
    assert str(w[0].message) == (
        "Using a target size (daskgrad.Size([4])) that is different to the input size (daskgrad.Size([4, 1])). "
        "This will likely lead to incorrect results due to broadcasting. Please ensure they have the same size.")
    assert loss.detach().item() == pytest.approx(3.5)  # torch: the mean over the 16 broadcast pairs
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[-1.25], [-0.75], [-0.25], [0.25]])


def test_bce_with_logits_refuses_mismatched_shapes():
    x = dg.tensor(np.zeros((4, 1)), requires_grad=True)
    with raises(ValueError, "Target size (daskgrad.Size([4])) must be the same as input size "
                            "(daskgrad.Size([4, 1]))"):
        dg.binary_cross_entropy_with_logits(x, dg.tensor([1.0, 0.0, 1.0, 0.0]))


def test_shape_misuse_raises_torchs_errors():
    with raises(RuntimeError, "shape '[4, 2]' is invalid for input of size 6"):
        m23().reshape(4, 2)
    with raises(RuntimeError, "shape '[4, -1]' is invalid for input of size 6"):
        m23().reshape(4, -1)
    with raises(RuntimeError, "only one dimension can be inferred"):
        m23().reshape(-1, -1)
    with raises(RuntimeError, "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"):
        dg.ones(2, 3) @ dg.ones(4, 5)
    with raises(RuntimeError, "size mismatch, got input (2), mat (2x3), vec (4)"):
        dg.ones(2, 3) @ dg.ones(4)
    with raises(RuntimeError, "Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 "
                              "for tensor number 1 in the list."):
        dg.concatenate([m23(), dg.ones(3, 3)], axis=1)
    with raises(RuntimeError, "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [3, 3] "
                              "at entry 1"):
        dg.stack([m23(), dg.ones(3, 3)])
    with raises(RuntimeError, "The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
                              "dimension 1"):
        m23() + dg.ones(4)
    with raises(RuntimeError, "The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
                              "dimension 1"):
        dg.where(m23() > 0, m23(), dg.ones(4))
    with raises(RuntimeError, "The expanded size of the tensor (3) must match the existing size (2) at "
                              "non-singleton dimension 0.  Target sizes: [3, 3].  Tensor sizes: [2, 3]"):
        m23().broadcast_to((3, 3))
    with raises(RuntimeError, "invalid shape dimension -2 at index 0 of shape [-2, 3]"):
        m23().reshape(-2, 3)
    with raises(RuntimeError, "contracted dimensions need to match, but first has size 3 in dim 1 and second "
                              "has size 2 in dim 0"):
        dg.tensordot(m23(), m23(), axes=([1], [0]))
    with raises(RuntimeError, "einsum(): subscript j has size 2 for operand 1 which does not broadcast with "
                              "previously seen size 3"):
        dg.einsum("ij,jk->ik", m23(), m23())
    with raises(IndexError, "The shape of the mask [3] at index 0 does not match the shape of the indexed tensor "
                            "[2, 3] at index 0"):
        m23()[dg.tensor([True, False, True])]


# ------------------------------------------------------------------- numerics
def test_mean_and_var_after_a_boolean_mask_count_lazily_and_differentiate():
    x = dg.tensor(np.array([[1.0, -2, 3], [4, 5, -6]]), requires_grad=True)
    m = x[x > 0].mean()
    assert m.detach().item() == pytest.approx(3.25)
    m.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.25, 0, 0.25], [0.25, 0.25, 0]])
    y = dg.tensor(np.array([1.0, -2, 3, 5]), requires_grad=True)
    v = y[y > 0].var()  # torch's method: Bessel's correction, counted lazily too
    assert v.detach().item() == pytest.approx(np.var([1.0, 3, 5], ddof=1))
    v.backward()
    np.testing.assert_allclose(y.grad.numpy(), [2 / 2 * (1 - 3), 0, 0, 2 / 2 * (5 - 3)])
    assert dg.var(y[y > 0]).detach().item() == pytest.approx(np.var([1.0, 3, 5]))  # NumPy's function


def test_max_sends_the_gradient_to_nan_and_amax_gives_nan_as_torch():
    x = dg.tensor([1.0, float("nan"), 3.0, float("nan")], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0, 0.5, 0, 0.5])
    y = dg.tensor(np.array([[1.0, np.nan], [3.0, 3.0]]), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y.amax(axis=1).sum().backward()
        grad = y.grad.numpy()
    np.testing.assert_allclose(grad, [[np.nan, np.nan], [0.5, 0.5]])


def test_pow_gradients_at_zero_are_masked_as_in_torch():
    a = dg.tensor([0.0, 0.0, 0.0, 2.0], requires_grad=True)
    b = dg.tensor([0.0, -1.0, 2.0, 0.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (a ** b).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), [0, -np.inf, 0, 0])
        np.testing.assert_allclose(b.grad.numpy(), [0, -np.inf, 0, np.log(2)], rtol=1e-6)
    c = dg.tensor([0.0, 1.0], requires_grad=True)
    (c ** 0).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), [0, 0])


def test_inplace_updates_with_plain_numbers_save_no_tensor():
    a = dg.tensor([1.0, 2.0], requires_grad=True)
    h = a * 1
    h *= 2
    h += 1
    h *= 3
    h /= 2
    assert h.grad_fn._saved_a is None  # the division by a plain number kept no copy of h
    h.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [3, 3])


def test_lazy_integer_index_is_checked_in_its_task_and_gives_torchs_gradient():
    x = dg.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    y = x[dg.tensor([0, -1, 2])]
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 2], [0, 0], [16, 20]])
    z = dg.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    out = z[dg.tensor([0, 5])].sum()
    with raises(IndexError, "index 5 is out of bounds for dimension 0 with size 3"):
        out.backward()
    assert z.grad is None
