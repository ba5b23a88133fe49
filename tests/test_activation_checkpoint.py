"""Activation checkpointing as torch.utils.checkpoint: the same gradients, the region run again in
the backward (its intermediate values are not kept), the same random numbers, torch's checks."""
import warnings

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.memory import PeakTracker
from daskgrad.utils.checkpoint import checkpoint, checkpoint_sequential

CHUNKINGS = [12, 4, (5, 7), 1]


def region(a, b):
    return dg.sin(a * b) * a + dg.exp(-b)


def leaves(chunks):
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal(12), rng.standard_normal(12)
    x = dg.from_array(xv, chunks=chunks, requires_grad=True)
    w = dg.from_array(wv, chunks=chunks, requires_grad=True)
    return x, w, xv, wv


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_gradients_equal_the_uncheckpointed_ones_across_chunkings(chunks, use_reentrant):
    x, w, _, _ = leaves(chunks)
    (region(x, w) ** 2).sum().backward()
    want = x.grad.numpy(), w.grad.numpy()
    x.grad = w.grad = None
    y = checkpoint(region, x, w, use_reentrant=use_reentrant)
    assert type(y.grad_fn).__name__ == "CheckpointFunctionBackward"
    (y ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), want[0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(w.grad.numpy(), want[1], rtol=1e-13, atol=1e-15)
    assert x.grad.chunks == x.chunks


def test_gradients_equal_torch_s_checkpoint():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    x, w, xv, wv = leaves(4)
    (checkpoint(region, x, w, use_reentrant=False) ** 2).sum().backward()
    tx, tw = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)
    (torch_checkpoint(lambda a, b: torch.sin(a * b) * a + torch.exp(-b), tx, tw, use_reentrant=False) ** 2
     ).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


def counted(calls):
    """An elementwise op that counts the chunks it computes (on the local threads)."""
    def kernel(block):
        calls.append(block.shape)
        return block * 2.0

    def vjp(g, block):
        return g * 2.0

    return lambda t: dg.map_blocks(kernel, t, vjp=vjp)


def test_the_region_runs_again_in_the_backward_instead_of_keeping_its_values():
    x, w, _, _ = leaves(4)
    calls = []
    double = counted(calls)

    def block(a):
        return dg.tanh(double(a)) * a

    (block(x) ** 2).sum().backward()
    assert len(calls) == 3  # once per chunk: the backward reads the kept values
    calls.clear()
    (checkpoint(block, x, use_reentrant=False) ** 2).sum().backward()
    assert len(calls) == 6  # once per chunk for the output, once more for the backward
    with dg.testing.submissions() as subs:
        (checkpoint(block, x, use_reentrant=False) ** 2).sum().backward()
    assert dict(subs) == {"backward": 1}


def wide_chain(checkpointed, regions=6, n=20_000, k=16):
    """``regions`` chained regions, each making (n, k) intermediates from an (n,) input (k times its
    size) and reducing them back; the backward's peak, in (n, k) arrays, and x's gradient."""
    x = dg.from_array(np.random.default_rng(0).standard_normal(n), chunks=n // 4, requires_grad=True)
    freq = dg.from_array(np.linspace(0.5, 1.5, k), chunks=k)

    def block(a):
        wide = dg.sin(a[:, None] * freq)
        return dg.tanh(wide * wide).mean(axis=1) + a

    h = x
    for _ in range(regions):
        h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
    loss = (h * h).sum()
    with dask.config.set(scheduler="sync"), PeakTracker() as tracker:
        loss.backward()
    return tracker.peak / (n * k * 8), x.grad.numpy()


def test_chained_checkpointed_regions_keep_no_intermediates_so_the_backward_peak_is_far_below_the_plain_one():
    plain, want = wide_chain(False)
    held, got = wide_chain(True)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    # the plain backward holds each region's saved (n, k) values at once (5.1 arrays for 6 regions);
    # the checkpointed one the regions' (n,) inputs and one region's values at a time (1.4-1.9 arrays,
    # with dask.order's hash-seeded tie breaks)
    assert plain >= 4
    assert held <= 2.5
    assert held <= plain / 2


def test_dropout_inside_draws_the_same_mask_in_both_runs():
    x, _, _, _ = leaves(4)
    dg.manual_seed(3)
    (dg.nn.functional.dropout(dg.sin(x), 0.5) ** 2).sum().backward()
    want = x.grad.numpy()
    x.grad = None
    dg.manual_seed(3)
    (checkpoint(lambda a: dg.nn.functional.dropout(dg.sin(a), 0.5), x, use_reentrant=False) ** 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), want)
    assert (want == 0).any() and (want != 0).any()


def test_double_backward_through_a_checkpoint_equals_the_plain_one():
    x, w, _, _ = leaves(4)
    (gx,) = dg.autograd.grad(region(x, w).sum(), x, create_graph=True)
    (ggx,) = dg.autograd.grad(gx.sum(), w)
    (cx,) = dg.autograd.grad(checkpoint(region, x, w, use_reentrant=False).sum(), x, create_graph=True)
    (cgx,) = dg.autograd.grad(cx.sum(), w)
    np.testing.assert_allclose(cgx.numpy(), ggx.numpy(), rtol=1e-13)


def test_retained_checkpointed_graph_backwards_twice():
    x, w, _, _ = leaves(4)
    loss = (checkpoint(region, x, w, use_reentrant=False) ** 2).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)


def test_several_outputs_and_non_tensor_arguments():
    x, w, xv, wv = leaves(4)

    def two(a, scale, b):
        return a * scale, dg.cos(b)

    p, q = checkpoint(two, x, 3.0, w, use_reentrant=True)
    (p.sum() + (q * q).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(12, 3.0))
    np.testing.assert_allclose(w.grad.numpy(), -2 * np.cos(wv) * np.sin(wv), rtol=1e-13)


def test_checkpoint_sequential_matches_the_plain_model_and_torch():
    torch = pytest.importorskip("torch")
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    X = dg.from_array(np.random.default_rng(1).standard_normal((20, 6)), chunks=(7, 6))
    model(X).pow(2).sum().backward()
    want = [p.grad.numpy() for p in model.parameters()]
    model.zero_grad()
    checkpoint_sequential(model, 3, X, use_reentrant=False).pow(2).sum().backward()
    for p, g in zip(model.parameters(), want):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-12)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                             torch.nn.Linear(8, 1)).double()
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), model.parameters()):
            tp.copy_(torch.tensor(p.detach().numpy()))
    from torch.utils.checkpoint import checkpoint_sequential as torch_sequential

    torch_sequential(tm, 3, torch.tensor(X.numpy()), use_reentrant=False).pow(2).sum().backward()
    for p, tp in zip(model.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-10)


def test_torch_s_warnings_and_argument_errors():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    def message(fn, *args, **kwargs):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                fn(*args, **kwargs)
            except Exception as e:
                return type(e), str(e)
        return [str(w.message) for w in seen]

    x = dg.ones(3, requires_grad=True)
    tx = torch.ones(3, requires_grad=True)
    assert message(checkpoint, dg.sin, x) == message(torch_checkpoint, torch.sin, tx)
    assert message(checkpoint, lambda a, b=1: a * b, x, b=2, use_reentrant=True) == \
        message(torch_checkpoint, lambda a, b=1: a * b, tx, b=2, use_reentrant=True)
    assert message(checkpoint, dg.sin, x, use_reentrant=True, debug=True) == \
        message(torch_checkpoint, torch.sin, tx, use_reentrant=True, debug=True)
    assert message(checkpoint, dg.sin, dg.ones(3), use_reentrant=True) == \
        message(torch_checkpoint, torch.sin, torch.ones(3), use_reentrant=True)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        assert not checkpoint(dg.sin, dg.ones(3), use_reentrant=True).requires_grad
    assert message(checkpoint, dg.sin, x, use_reentrant=False, determinism_check="x") == \
        message(torch_checkpoint, torch.sin, tx, use_reentrant=False, determinism_check="x")
    from torch.utils.checkpoint import checkpoint_sequential as torch_sequential

    seq = nn.Sequential(nn.Tanh(), nn.Tanh())
    tseq = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Tanh())
    assert message(checkpoint_sequential, seq, 2, x) == message(torch_sequential, tseq, 2, tx)
    assert message(checkpoint_sequential, seq, 2, x, use_reentrant=False, foo=1) == \
        message(torch_sequential, tseq, 2, tx, use_reentrant=False, foo=1)
    assert message(checkpoint, dg.sin, x, use_reentrant=False, foo=1)[0] is TypeError  # sin takes no foo


def test_parameters_read_inside_get_gradients_except_where_torch_s_reentrant_variant_gives_none():
    torch = pytest.importorskip("torch")
    layer = nn.Linear(4, 2).double()
    tlayer = torch.nn.Linear(4, 2).double()
    with torch.no_grad():
        tlayer.weight.copy_(torch.tensor(layer.weight.detach().numpy()))
        tlayer.bias.copy_(torch.tensor(layer.bias.detach().numpy()))
    X = np.random.default_rng(2).standard_normal((6, 4))
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    for reentrant in (False, True):
        layer.zero_grad(set_to_none=True)
        tlayer.zero_grad(set_to_none=True)
        x, tx = dg.from_array(X, chunks=(3, 4)), torch.tensor(X)  # the input does not require grad
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = checkpoint(lambda a: dg.tanh(layer(a)), x, use_reentrant=reentrant)
            tout = torch_checkpoint(lambda a: torch.tanh(tlayer(a)), tx, use_reentrant=reentrant)
        assert out.requires_grad == tout.requires_grad
        if tout.requires_grad:
            out.sum().backward()
            tout.sum().backward()
            np.testing.assert_allclose(layer.weight.grad.numpy(), tlayer.weight.grad.numpy(), rtol=1e-12)
            np.testing.assert_allclose(layer.bias.grad.numpy(), tlayer.bias.grad.numpy(), rtol=1e-12)
        assert (layer.weight.grad is None) == (tlayer.weight.grad is None)


def test_a_tensor_requiring_grad_read_from_outside_is_refused_with_the_fix():
    x, w, _, _ = leaves(4)
    h = w * 2.0  # made outside, read inside by closure
    with pytest.raises(RuntimeError, match="pass that tensor as an argument of checkpoint"):
        checkpoint(lambda a: a * h, x, use_reentrant=False)
    y = checkpoint(lambda a, b: a * b, x, h, use_reentrant=False)  # the fix
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.detach().numpy())


def test_under_no_grad_the_function_just_runs():
    x, w, xv, wv = leaves(4)
    with dg.no_grad():
        y = checkpoint(region, x, w, use_reentrant=False)
    assert y.grad_fn is None and not y.requires_grad
    np.testing.assert_allclose(y.numpy(), np.sin(xv * wv) * xv + np.exp(-wv))


# ------------------------------------------------------------------ determinism check (torch's
# test_autograd.py test_checkpoint_detects_non_determinism, ported; torch run alongside as the oracle)
def changing(first, then):
    """A region that runs ``first`` on its first call and ``then`` on every later one."""
    calls = [0]

    def fn(x):
        calls[0] += 1
        return first(x) if calls[0] == 1 else then(x)

    return fn


def outcome(lib, checkpoint_fn, first, then, x, **kwargs):
    """(exception type name, message up to torch's tip) of a checkpointed backward, or its gradient.

    The tip after the message names torch-only tools (debug logs, torch.compile); daskgrad's tip is
    its own.  torch's shape, dtype and device reprs are written as daskgrad writes them."""
    x.grad = None
    try:
        checkpoint_fn(changing(first, then), x, use_reentrant=False, **kwargs).sum().backward()
    except RuntimeError as e:
        text = str(e).split("\nTip:")[0]
        if lib == "torch":
            text = text.replace("torch.Size(", "daskgrad.Size(").replace("torch.float64", "daskgrad.float64")
        return type(e).__name__, text
    return x.grad.numpy() if lib == "dg" else x.grad.detach().numpy()


def both(first, then, t_first, t_then, values, **kwargs):
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    x = dg.from_array(np.asarray(values, dtype=np.float64), chunks=2, requires_grad=True)
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    with dg.testing.submissions() as subs:
        got = outcome("dg", checkpoint, first, then, x, **kwargs)
    want = outcome("torch", torch_checkpoint, t_first, t_then, tx, **kwargs)
    return got, want, dict(subs)


def test_a_second_run_saving_fewer_tensors_raises_torch_s_checkpoint_error_before_anything_runs():
    torch = pytest.importorskip("torch")
    got, want, subs = both(lambda a: dg.sin(dg.exp(dg.sin(a))), lambda a: dg.exp(dg.sin(a)),
                           lambda a: a.sin().exp().sin(), lambda a: a.sin().exp(), [0.5])
    assert got == want
    assert got[0] == "CheckpointError" and got[1].startswith(
        "torch.utils.checkpoint: A different number of tensors was saved during the original forward and "
        "recomputation.\nNumber of tensors saved during forward: 3\nNumber of tensors saved during recomputation: 2.")
    assert subs == {}  # refused on the client: the second run is only recorded when it is checked
    from daskgrad.utils.checkpoint import CheckpointError
    assert CheckpointError.__bases__ == torch.utils.checkpoint.CheckpointError.__bases__ == (RuntimeError,)


def test_a_second_run_saving_tensors_of_another_shape_raises_torch_s_metadata_error():
    # torch's case: the same number of saved tensors, the second of another shape
    torch = pytest.importorskip("torch")
    const = np.array([1.0, 2.0])
    got, want, subs = both(lambda a: dg.exp(dg.sin(a)), lambda a: dg.sin(a) * dg.from_array(const),
                           lambda a: a.sin().exp(), lambda a: a.sin() * torch.tensor(const), [0.5])
    assert got == want and subs == {}
    assert got == ("CheckpointError",
                   "torch.utils.checkpoint: Recomputed values for the following tensors have different metadata "
                   "than during the forward pass.\ntensor at position 1:\n"
                   "saved metadata: {'shape': daskgrad.Size([1]), 'dtype': daskgrad.float64, "
                   "'device': device(type='cpu')}\n"
                   "recomputed metadata: {'shape': daskgrad.Size([2]), 'dtype': daskgrad.float64, "
                   "'device': device(type='cpu')}\n.\n")


def test_a_region_whose_output_shape_follows_a_call_counter_raises_the_metadata_error_as_torch():
    calls = [0]

    def region(a):  # the chunked tensor sliced shorter at each call; sin saves the slice
        calls[0] += 1
        return dg.sin(a[:5 - calls[0]])

    t_calls = [0]

    def t_region(a):
        t_calls[0] += 1
        return a[:5 - t_calls[0]].sin()

    got, want, subs = both(region, region, t_region, t_region, [0.1, 0.2, 0.3, 0.4, 0.5])
    assert got == want and subs == {}
    assert got[0] == "CheckpointError" and "tensor at position 0:\nsaved metadata: {'shape': daskgrad.Size([4])" \
        in got[1] and "recomputed metadata: {'shape': daskgrad.Size([3])" in got[1]


def test_determinism_check_none_skips_the_metadata_check_but_not_the_count():
    torch = pytest.importorskip("torch")
    # a factor saved as shape (1,) in the first run and (4,) in the second: the same gradient either way
    values = [0.5, 1.0, 1.5, 2.0]
    got, want, _ = both(lambda a: a * dg.from_array(np.array([2.0])), lambda a: a * dg.from_array(np.full(4, 2.0)),
                        lambda a: a * torch.tensor([2.0], dtype=torch.float64),
                        lambda a: a * torch.full((4,), 2.0, dtype=torch.float64), values)
    assert got == want and got[0] == "CheckpointError" and "tensor at position 0:" in got[1]
    got, want, _ = both(lambda a: a * dg.from_array(np.array([2.0])), lambda a: a * dg.from_array(np.full(4, 2.0)),
                        lambda a: a * torch.tensor([2.0], dtype=torch.float64),
                        lambda a: a * torch.full((4,), 2.0, dtype=torch.float64), values, determinism_check="none")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.full(4, 2.0))
    got, want, _ = both(lambda a: dg.sin(dg.exp(dg.sin(a))), lambda a: dg.exp(dg.sin(a)),
                        lambda a: a.sin().exp().sin(), lambda a: a.sin().exp(), [0.5], determinism_check="none")
    assert got == want and "A different number of tensors was saved" in got[1]


def test_a_second_run_saving_more_tensors_raises_as_torch_does_without_early_stop():
    # torch stops its second run once it has saved as many tensors as the first (early stop, on by default)
    # and back-propagates through the first run's graph; daskgrad records the whole second run and
    # back-propagates through it, so it refuses, as torch does with early stop off
    torch = pytest.importorskip("torch")
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        got, want, subs = both(lambda a: dg.exp(dg.sin(a)), lambda a: dg.sin(dg.exp(dg.sin(a))),
                               lambda a: a.sin().exp(), lambda a: a.sin().exp().sin(), [0.5])
    assert got == want and subs == {}
    assert got == ("CheckpointError", "torch.utils.checkpoint: trying to save more tensors during recomputation than "
                   "during the original forward pass.\n")


def test_the_reentrant_variant_and_a_deterministic_region_are_not_checked():
    calls = [0]

    def region(a):
        calls[0] += 1
        return dg.sin(a) * a if calls[0] == 1 else dg.sin(a) * a + 0.0 * dg.exp(a)  # one more saved tensor

    x, _, xv, _ = leaves(4)
    checkpoint(region, x, use_reentrant=True).sum().backward()  # torch: "the determinism check is always disabled"
    np.testing.assert_allclose(x.grad.numpy(), np.cos(xv) * xv + np.sin(xv), rtol=1e-13)
