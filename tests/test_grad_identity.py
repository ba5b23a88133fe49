"""``.grad`` object semantics as torch's: which tensor backward adds into in place, which it replaces.

torch's AccumulateGrad adds a leaf's new gradient into the ``.grad`` it holds in place
(``variable_grad += new_grad``) unless grad mode is on (``create_graph=True``: a new tensor); a retained
non-leaf's ``.grad`` is summed out of place; ``zero_grad(set_to_none=False)`` zeroes ``.grad`` in place.
Each program runs on torch (the oracle) and on daskgrad; the values of every tensor the user holds, and
the identities it checks, must agree."""
import numpy as np
import pytest
import torch

import daskgrad as dg


def arange(M, n=3, requires_grad=True, chunks=2):
    if M is torch:
        return torch.arange(float(n), dtype=torch.float64, requires_grad=requires_grad)
    return dg.from_array(np.arange(float(n)), chunks=chunks, requires_grad=requires_grad)


def full(M, shape, v, requires_grad=False):
    if M is torch:
        return torch.full(shape, v, dtype=torch.float64, requires_grad=requires_grad)
    return dg.full(shape, v, dtype="float64", requires_grad=requires_grad)


def val(t):
    return t.detach().numpy().copy()


def assigned_view(M):
    x, G = arange(M), full(M, (2, 3), 1.0)
    x.grad = G[1]
    (x * x).sum().backward()
    return [val(G), x.grad is not None and val(x.grad)]


def assigned_tensor(M):
    x, g0 = arange(M), full(M, (3,), 5.0)
    x.grad = g0
    (x * 2).sum().backward()
    out = [val(g0), x.grad is g0]
    (x * x).sum().backward()
    return out + [val(g0), x.grad is g0]


def assigned_in_own_chunks(M):
    x, g0 = arange(M, 4, chunks=2), full(M, (4,), 1.0)
    if M is dg:
        g0 = dg.from_array(np.ones(4), chunks=3)
    x.grad = g0
    (x * 3).sum().backward()
    return [val(g0), x.grad is g0]


def held_after_first_backward(M):
    x = arange(M)
    (x * x).sum().backward()
    g = x.grad
    (x * 3).sum().backward()
    return [val(g), x.grad is g]


def create_graph_out_of_place(M):
    x, g0 = arange(M), full(M, (3,), 5.0)
    x.grad = g0
    (x * 2).sum().backward(create_graph=True)
    return [val(g0), val(x.grad), x.grad is g0]


def create_graph_then_plain(M):
    x = arange(M)
    (x * x).sum().backward(create_graph=True)
    g = x.grad
    (x * 2).sum().backward()
    return [val(g), x.grad is g]


def assigned_requires_grad(M):
    x, g0 = arange(M), full(M, (3,), 5.0, requires_grad=True)
    x.grad = g0
    (x * 2).sum().backward()
    return [val(g0), x.grad is g0]


def retained_out_of_place(M):
    x = arange(M)
    y = x * 1
    y.retain_grad()
    (y * y).sum().backward(retain_graph=True)
    a = y.grad
    (y * 2).sum().backward()
    return [val(a), val(y.grad), a is y.grad]


def inputs_non_leaf_out_of_place(M):
    x = arange(M)
    y = x * 1
    (y * y).sum().backward(inputs=[y], retain_graph=True)
    a = y.grad
    (y * 2).sum().backward(inputs=[y])
    return [val(a), val(y.grad), a is y.grad]


def not_the_given_gradient(M):
    x = arange(M)
    g = full(M, (3,), 1.0)
    x.backward(g)
    out = [x.grad is g]
    x2 = arange(M)
    (x2 * 1).backward(g)
    G = full(M, (3,), 4.0)
    x3 = arange(M)
    x3.register_hook(lambda _: G)
    (x3 * 1).sum().backward()
    return out + [x2.grad is g, x3.grad is G, val(G)]


def post_accumulate_hook_sees_it(M):
    x, g0 = arange(M), full(M, (3,), 5.0)
    x.grad = g0
    seen = []
    x.register_post_accumulate_grad_hook(lambda p: seen.append((p.grad is g0, val(p.grad))))
    (x * 2).sum().backward()
    return [seen[0][0], seen[0][1], val(g0)]


def optimizer_zero_grad_in_place(M):
    x = arange(M)
    opt = M.optim.SGD([x], lr=0.1)
    (x * x).sum().backward()
    g = x.grad
    opt.zero_grad(set_to_none=False)
    out = [val(g), x.grad is g]
    (x * 3).sum().backward()
    return out + [val(g), x.grad is g]


def optimizer_zero_grad_detaches(M):
    x = arange(M)
    opt = M.optim.SGD([x], lr=0.1)
    (x * x).sum().backward(create_graph=True)
    g = x.grad
    opt.zero_grad(set_to_none=False)
    return [x.grad is g, val(g), g.requires_grad, g.grad_fn is None]


def module_zero_grad_in_place(M):
    m = M.nn.Linear(2, 1).double()
    x = full(M, (1, 2), 1.0)
    m(x).sum().backward()
    g = m.weight.grad
    m.zero_grad(set_to_none=False)
    out = [val(g), m.weight.grad is g]
    (m(x) * 2).sum().backward()
    return out + [val(g), m.weight.grad is g]


def step_reads_accumulated(M):
    x = arange(M)
    opt = M.optim.SGD([x], lr=0.5)
    g0 = full(M, (3,), 1.0)
    x.grad = g0
    (x * x).sum().backward()
    opt.step()
    return [val(x), val(g0)]


def backward_under_no_grad(M):
    x = arange(M)
    loss = (x * x).sum()
    g0 = full(M, (3,), 1.0)
    x.grad = g0
    with M.no_grad():
        loss.backward()
    return [val(g0), x.grad is g0]


def detached_view_assigned(M):
    x, G = arange(M), full(M, (2, 3), 1.0)
    v = G[0]
    x.grad = G[0].detach()
    (x * x).sum().backward()
    return [val(G), val(v)]


def base_with_a_view_assigned(M):
    x, b = arange(M), full(M, (3,), 0.0)
    v = b[1:]
    x.grad = b
    (x * x).sum().backward()
    return [val(v), val(b), x.grad is b]


def backward_inputs_leaf_twice(M):
    x, g0 = arange(M), full(M, (3,), 1.0)
    x.grad = g0
    loss = (x * x).sum()
    loss.backward(inputs=[x], retain_graph=True)
    loss.backward(inputs=[x])
    return [val(g0), x.grad is g0]


def autograd_backward_with_grad_tensors(M):
    x, g0 = arange(M), full(M, (3,), 1.0)
    x.grad = g0
    M.autograd.backward([x * 2], [full(M, (3,), 1.0)])
    return [val(g0), x.grad is g0]


PROGRAMS = [assigned_view, assigned_tensor, assigned_in_own_chunks, held_after_first_backward,
            create_graph_out_of_place, create_graph_then_plain, assigned_requires_grad, retained_out_of_place,
            inputs_non_leaf_out_of_place, not_the_given_gradient, post_accumulate_hook_sees_it,
            optimizer_zero_grad_in_place, optimizer_zero_grad_detaches, module_zero_grad_in_place,
            step_reads_accumulated, backward_under_no_grad, detached_view_assigned, base_with_a_view_assigned,
            backward_inputs_leaf_twice, autograd_backward_with_grad_tensors]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__)
def test_as_torch(program):
    want, got = program(torch), program(dg)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w)
        else:
            assert g == w, (want, got)


def test_grad_keeps_leaf_chunks():
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    g0 = dg.from_array(np.ones(4), chunks=3)
    x.grad = g0
    assert x.grad is g0 and x.grad.chunks == x.chunks
    (x * 3).sum().backward()
    assert x.grad is g0 and x.grad.chunks == x.chunks
    np.testing.assert_allclose(g0.numpy(), np.full(4, 4.0))


@pytest.mark.parametrize("view", [True, False])
def test_in_place_accumulation_is_the_backwards_one_submission(view):
    x = dg.from_array(np.arange(3.0), chunks=2, requires_grad=True)
    G = dg.from_array(np.ones((2, 3)), chunks=(1, 2))
    g = G[1] if view else dg.from_array(np.ones(3), chunks=2)
    x.grad = g
    with dg.testing.submissions() as subs:
        (x * x).sum().backward()
    assert dict(subs) == {"backward": 1}
    with dg.testing.submissions() as subs:  # the sum, and the base written through the view, are computed
        values = G.numpy(), g.numpy(), x.grad.numpy()
    assert dict(subs) == {}
    np.testing.assert_allclose(values[0], [[1, 1, 1], [1, 3, 5]] if view else np.ones((2, 3)))
    np.testing.assert_allclose(values[1], [1, 3, 5])
    assert x.grad is g


def test_expanded_grad_refuses_in_place_accumulation():
    def run(M):
        x = arange(M)
        x.grad = (torch.zeros(1, dtype=torch.float64) if M is torch else dg.zeros(1, dtype="float64")).expand(3)
        with pytest.raises(RuntimeError) as e:
            (x * 2).sum().backward()
        return str(e.value)
    assert run(dg) == run(torch)
