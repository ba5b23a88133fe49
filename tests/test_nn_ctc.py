"""``nn.functional.ctc_loss`` and ``nn.CTCLoss`` against torch (installed): float64 values and gradients equal to
torch's over one, even, uneven and size-1 chunkings of the batch, for padded and concatenated targets, every
reduction, lengths as tuples, tensors in memory and lazy tensors, ``zero_infinity`` with targets no alignment
reaches, a blank other than 0, unbatched input, log-probabilities that are not normalised (torch's gradient formula,
not the textbook one), and torch's errors, raised before anything is submitted.  torch's module_db samples run in
tests/test_module_db.py."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F
from daskgrad.testing import gradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

T, N, C, S = 9, 6, 6, 4
CHUNKS = {"one": -1, "even": 2, "uneven": (1, 3, 2), "size1": 1}  # along the batch axis
RNG = np.random.default_rng(3)
LOG_PROBS = torch.tensor(RNG.standard_normal((T, N, C))).log_softmax(2).numpy()
INPUT_LENGTHS = (9, 7, 9, 4, 6, 8)
TARGET_LENGTHS = (4, 3, 0, 2, 1, 4)
PADDED = np.array([[1, 2, 2, 3], [4, 4, 5, 1], [2, 3, 1, 1], [5, 1, 0, 0], [3, 2, 2, 2], [1, 1, 1, 1]])  # (repeats)
CONCATENATED = np.concatenate([PADDED[n, :k] for n, k in enumerate(TARGET_LENGTHS)])


def _dg(a, chunking="one", grad=False):
    a = np.asarray(a)
    chunks = tuple(CHUNKS[chunking] if i == 1 else -1 for i in range(a.ndim)) if a.ndim == 3 else -1
    return dg.from_array(a, chunks=chunks, requires_grad=grad)


def _torch_lengths(x):
    return torch.tensor(np.asarray(x)) if isinstance(x, (np.ndarray, dg.Tensor)) else x


def _compare(log_probs, targets, il, tl, chunking="one", rtol=1e-10, atol=1e-12, lengths=None, **kwargs):
    """Our loss and the gradient of its log-probabilities for one random cotangent equal torch's."""
    x = _dg(log_probs, chunking, grad=True)
    ours_il, ours_tl = (il, tl) if lengths is None else (lengths(il), lengths(tl))
    out = F.ctc_loss(x, dg.from_array(np.asarray(targets)), ours_il, ours_tl, **kwargs)
    t = torch.tensor(log_probs, requires_grad=True)
    expected = TF.ctc_loss(t, torch.tensor(targets), il, tl, **kwargs)
    w = np.asarray(np.random.default_rng(1).standard_normal(tuple(expected.shape)))
    (expected * torch.tensor(w)).sum().backward()
    (out * dg.from_array(w)).sum().backward()
    assert out.shape == tuple(expected.shape)
    value, grad = dg.compute(out.detach(), x.grad)
    np.testing.assert_allclose(value, expected.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=rtol, atol=atol)
    assert x.grad.chunks == x.chunks
    return out


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ctc_loss_gives_torchs_values_and_gradients_over_every_chunking_layout_and_reduction(chunking, layout,
                                                                                              reduction):
    targets = PADDED if layout == "padded" else CONCATENATED
    if chunking == "size1":
        x = _dg(LOG_PROBS, "size1")
        assert x.chunks[1] == (1,) * N
    _compare(LOG_PROBS, targets, INPUT_LENGTHS, TARGET_LENGTHS, chunking, reduction=reduction)


@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("kind", ["in memory", "lazy", "int32"])
def test_lengths_given_as_tensors_in_memory_or_lazy_give_torchs_results(layout, kind):
    targets = PADDED if layout == "padded" else CONCATENATED
    make = {"in memory": lambda v: dg.from_array(np.array(v), chunks=2),
            "lazy": lambda v: dg.from_array(np.array(v), chunks=2) * 1,  # (an op's result: its values not known)
            "int32": lambda v: dg.from_array(np.array(v, dtype=np.int32))}[kind]
    for reduction in ("none", "mean"):
        _compare(LOG_PROBS, targets, INPUT_LENGTHS, TARGET_LENGTHS, "uneven", lengths=make, reduction=reduction)


@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_infeasible_targets_give_torchs_inf_loss_and_nan_gradient_or_zeros_with_zero_infinity(zero_infinity,
                                                                                              layout):
    # sample 0: 4 labels in 3 steps; sample 1: "4 4" needs a blank between (3 steps) in 2; sample 2: no input
    # and a label; sample 3: no input and no label (loss 0); sample 4 feasible; sample 5: "1 1 1 1" needs 7 steps
    il, tl = (3, 2, 0, 0, 9, 7), (4, 2, 1, 0, 2, 4)
    padded = np.array([[1, 2, 3, 4], [4, 4, 0, 0], [2, 0, 0, 0], [0, 0, 0, 0], [3, 3, 0, 0], [1, 1, 1, 1]])
    targets = padded if layout == "padded" else np.concatenate([padded[n, :k] for n, k in enumerate(tl)])
    for reduction in ("none", "sum", "mean"):
        out = _compare(LOG_PROBS, targets, il, tl, "uneven", reduction=reduction, zero_infinity=zero_infinity)
    if not zero_infinity:
        assert np.isinf(F.ctc_loss(_dg(LOG_PROBS), targets, il, tl, reduction="none").numpy()[:3]).all()
    assert out.grad_fn.name() == "MeanBackward0"


def test_lazy_lengths_with_concatenated_targets_longer_than_the_input_give_inf_as_torch():
    # (lazy lengths: the kernel's width is the input length, and a longer target is unreachable)
    il, tl = (3, 9, 9, 9, 9, 9), (2, 12, 1, 1, 1, 0)
    targets = RNG.integers(1, C, sum(tl))
    for zero_infinity in (False, True):
        _compare(LOG_PROBS, targets, il, tl, "even", lengths=lambda v: dg.from_array(np.array(v)) + 0,
                 reduction="none", zero_infinity=zero_infinity)


@pytest.mark.parametrize("blank", [C - 1, 2])
def test_a_blank_other_than_zero_gives_torchs_results(blank):
    targets = np.where(PADDED == blank, 1 if blank != 1 else 3, PADDED)
    _compare(LOG_PROBS, targets, INPUT_LENGTHS, TARGET_LENGTHS, "even", blank=blank, reduction="mean")
    flat = np.concatenate([targets[n, :k] for n, k in enumerate(TARGET_LENGTHS)])
    _compare(LOG_PROBS, flat, INPUT_LENGTHS, TARGET_LENGTHS, "uneven", blank=blank, reduction="sum")


def test_a_target_label_equal_to_blank_gives_torchs_results():
    # (torch does not refuse it: its last step assigns the label's entry over blank's)
    targets = PADDED.copy()
    targets[:, 0] = 0
    _compare(LOG_PROBS, targets, INPUT_LENGTHS, TARGET_LENGTHS, "uneven", reduction="none")


def test_log_probabilities_that_are_not_normalised_get_torchs_gradient_formula():
    raw = RNG.standard_normal((T, N, C))
    _compare(raw, PADDED, INPUT_LENGTHS, TARGET_LENGTHS, "uneven", reduction="sum")
    _compare(raw, PADDED, INPUT_LENGTHS, TARGET_LENGTHS, "size1", reduction="mean", zero_infinity=True)


def test_float32_log_probabilities_give_a_float32_loss_close_to_torchs():
    lp = LOG_PROBS.astype(np.float32)
    out = _compare(lp, PADDED, INPUT_LENGTHS, TARGET_LENGTHS, "even", rtol=1e-5, atol=1e-6, reduction="none")
    assert out.dtype == np.float32


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_unbatched_input_gives_torchs_results(reduction):
    lp = LOG_PROBS[:, 0]
    for il, tl in (((9,), (4,)), (np.array(9), np.array(4))):
        x = dg.from_array(lp, requires_grad=True)
        lengths = (il, tl) if isinstance(il, tuple) else (dg.from_array(il), dg.from_array(tl))
        out = F.ctc_loss(x, dg.from_array(PADDED[0]), *lengths, reduction=reduction)
        t = torch.tensor(lp, requires_grad=True)
        expected = TF.ctc_loss(t, torch.tensor(PADDED[0]), *map(_torch_lengths, (il, tl)), reduction=reduction)
        assert out.shape == tuple(expected.shape) == ()
        out.backward()
        expected.backward()
        np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-10)
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_ctc_loss_of_log_softmax_passes_gradcheck_and_records_torchs_node_with_log_probs_its_only_input():
    # torch's gradient adds exp(log_probs) * g, which a log_softmax before it takes out: the derivative of the
    # composition (torch's own gradcheck of ctc_loss composes it too)
    z = dg.from_array(RNG.standard_normal((T, N, C)), chunks=(T, 2, C), requires_grad=True)
    targets = dg.from_array(PADDED)
    assert gradcheck(lambda v: F.ctc_loss(F.log_softmax(v, 2), targets, INPUT_LENGTHS, TARGET_LENGTHS,
                                          reduction="none"), [z])
    assert gradcheck(lambda v: F.ctc_loss(F.log_softmax(v, 2), CONCATENATED, INPUT_LENGTHS, TARGET_LENGTHS), [z])
    x = _dg(LOG_PROBS, "uneven", grad=True)
    out = F.ctc_loss(x, targets, INPUT_LENGTHS, TARGET_LENGTHS, reduction="none")
    expected = TF.ctc_loss(torch.tensor(LOG_PROBS, requires_grad=True), torch.tensor(PADDED), INPUT_LENGTHS,
                           TARGET_LENGTHS, reduction="none")
    assert out.grad_fn.name() == expected.grad_fn.name() == "CtcLossBackward0"
    assert len(out.grad_fn.next_functions) == len(expected.grad_fn.next_functions) == 1


def test_the_gradient_has_no_derivative_as_torchs():
    x = _dg(LOG_PROBS, "even", grad=True)
    out = F.ctc_loss(x, PADDED, INPUT_LENGTHS, TARGET_LENGTHS)
    (g,) = dg.autograd.grad(out, [x], create_graph=True)
    with pytest.raises(RuntimeError, match="^derivative for aten::_ctc_loss_backward is not implemented$"):
        dg.autograd.grad(g.sum(), [x])


def test_ctc_loss_module_has_torchs_defaults_and_repr_and_calls_the_function():
    m, t = nn.CTCLoss(blank=2, reduction="sum", zero_infinity=True), torch.nn.CTCLoss(2, "sum", True)
    assert (m.blank, m.reduction, m.zero_infinity) == (t.blank, t.reduction, t.zero_infinity)
    assert repr(nn.CTCLoss()) == repr(torch.nn.CTCLoss()) == "CTCLoss()"
    assert nn.CTCLoss().reduction == "mean" and nn.CTCLoss().blank == 0 and not nn.CTCLoss().zero_infinity
    targets = np.where(PADDED == 2, 1, PADDED)
    out = m(_dg(LOG_PROBS, "even"), targets, INPUT_LENGTHS, TARGET_LENGTHS)
    expected = t(torch.tensor(LOG_PROBS), torch.tensor(targets), INPUT_LENGTHS, TARGET_LENGTHS)
    np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-10)


# ------------------------------------------------------------------ errors
LP = torch.tensor(LOG_PROBS)
TG = torch.tensor(PADDED)
IL, TL = INPUT_LENGTHS, TARGET_LENGTHS
BAD = {
    "an input length past T": lambda lp, tg, t: (lp, tg, (10,) + IL[1:], TL),
    "a negative input length": lambda lp, tg, t: (lp, tg, (-1,) + IL[1:], TL),
    "a negative target length": lambda lp, tg, t: (lp, tg, IL, (-1,) + TL[1:]),
    "a target length past S": lambda lp, tg, t: (lp, tg, IL, (5,) + TL[1:]),
    "too few input lengths": lambda lp, tg, t: (lp, tg, IL[1:], TL),
    "too few target lengths": lambda lp, tg, t: (lp, tg, IL, TL[1:]),
    "too few target rows": lambda lp, tg, t: (lp, tg[1:], IL, TL),
    "concatenated targets of another length": lambda lp, tg, t: (lp, tg.reshape(-1), IL, TL),
    "3-d targets": lambda lp, tg, t: (lp, tg[None], IL, TL),
    "0-d targets": lambda lp, tg, t: (lp, tg[0, 0], IL, TL),
    "4-d log_probs": lambda lp, tg, t: (lp[None], tg, IL, TL),
    "1-d log_probs": lambda lp, tg, t: (lp[:, 0, 0], tg, IL, TL),
    "empty log_probs": lambda lp, tg, t: (lp[:0], tg, (0,) * N, TL),
    "float input lengths": lambda lp, tg, t: (lp, tg, t(np.array(IL, dtype=np.float64)), t(np.array(TL))),
    "bool input lengths": lambda lp, tg, t: (lp, tg, t(np.ones(N, dtype=bool)), t(np.array(TL))),
    "float target lengths": lambda lp, tg, t: (lp, tg, t(np.array(IL)), t(np.array(TL, dtype=np.float32))),
    "a tensor and a tuple": lambda lp, tg, t: (lp, tg, t(np.array(IL)), TL),
    "an int length": lambda lp, tg, t: (lp, tg, 9, TL),
    "NumPy array lengths": lambda lp, tg, t: (lp, tg, np.array(IL), np.array(TL)),
    "nested list lengths": lambda lp, tg, t: (lp, tg, [[v] for v in IL], [[v] for v in TL]),
    "half log_probs": lambda lp, tg, t: (lp.half() if hasattr(lp, "half") else lp.astype(np.float16), tg, IL, TL),
}


def _torch_tensor(a):
    return torch.tensor(a)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_gives_torchs_error_before_anything_is_submitted(case, submissions):
    with pytest.raises(Exception) as expected:
        TF.ctc_loss(*BAD[case](LP, TG, _torch_tensor))
    lp, tg = dg.from_array(LOG_PROBS, chunks=(T, 2, C)), dg.from_array(PADDED)
    with pytest.raises(Exception) as got:
        F.ctc_loss(*BAD[case](lp, tg, dg.from_array))
    assert type(got.value) is type(expected.value)
    if isinstance(expected.value, TypeError):  # (torch's argument parser adds which argument failed to match)
        assert str(expected.value).startswith(str(got.value).split("\n")[0])
    else:
        assert str(got.value) == str(expected.value)
    assert sum(submissions.values()) == 0


@pytest.mark.parametrize("option", [dict(blank=C), dict(blank=-1), dict(reduction="avg")])
def test_a_bad_blank_or_reduction_gives_torchs_error(option):
    with pytest.raises(Exception) as expected:
        TF.ctc_loss(LP, TG, IL, TL, **option)
    with pytest.raises(type(expected.value), match=f"^{expected.value}$"):
        F.ctc_loss(_dg(LOG_PROBS), PADDED, IL, TL, **option)


@pytest.mark.parametrize("case", ["an input length past T", "a negative input length", "a negative target length",
                                  "a target length past S"])
def test_lazy_lengths_out_of_range_raise_torchs_error_from_the_submission(case):
    with pytest.raises(RuntimeError) as expected:
        TF.ctc_loss(*BAD[case](LP, TG, _torch_tensor))
    _, _, il, tl = BAD[case](LP, TG, _torch_tensor)
    lazy = [dg.from_array(np.array(v)) + 0 for v in (il, tl)]
    out = F.ctc_loss(_dg(LOG_PROBS, "size1"), PADDED, *lazy, reduction="none")
    with pytest.raises(RuntimeError, match=f"^{expected.value}$".replace("(", r"\(").replace(")", r"\)")):
        out.numpy()


@pytest.mark.parametrize("label", [-1, C])
@pytest.mark.parametrize("lazy", [False, True])
def test_a_label_out_of_range_is_refused_where_torch_reads_past_its_row(label, lazy):
    # (torch's CPU kernel does not check: its loss is whatever memory holds; NumPy's indexing would wrap -1)
    targets = PADDED.copy()
    targets[1, 2] = label
    padding = PADDED.copy()
    padding[3, 3] = label  # (past sample 3's length: never read)
    np.testing.assert_allclose(F.ctc_loss(_dg(LOG_PROBS), padding, IL, TL, reduction="none").numpy(),
                               TF.ctc_loss(LP, torch.tensor(padding), IL, TL, reduction="none").numpy(), rtol=1e-10)
    tg = dg.from_array(targets) + 0 if lazy else targets
    with pytest.raises(IndexError, match=f"^Target {label} is out of bounds.$"):
        F.ctc_loss(_dg(LOG_PROBS, "even"), tg, IL, TL).item()


def test_ctc_loss_runs_on_device_like_chunks_without_host_conversion():
    from strict_array import StrictArray, to_strict

    x = to_strict(_dg(LOG_PROBS, "uneven")).requires_grad_(True)
    out = F.ctc_loss(x, PADDED, INPUT_LENGTHS, TARGET_LENGTHS, reduction="sum")
    out.backward()
    assert isinstance(x.grad.array.blocks[0].compute(), StrictArray)
    t = torch.tensor(LOG_PROBS, requires_grad=True)
    TF.ctc_loss(t, TG, IL, TL, reduction="sum").backward()
    np.testing.assert_allclose(x.grad.array.compute().get(), t.grad.numpy(), rtol=1e-10, atol=1e-12)
