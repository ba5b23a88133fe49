"""Views as torch's, with torch as the oracle: a write through a view reaches its base and every other
view of it, gradients flow through the rewritten history, and torch's errors are raised where torch
raises them.

Each case is one program written once against a library ``L`` (torch or daskgrad) and a ``make``
that builds a float64 input in it (chunked as the parametrized chunking says, for daskgrad).  It
returns named results; for every tensor among them the two libraries must agree on the values, the
shape, ``_version``, ``_is_view()``, which returned tensor is its ``_base``, ``is_contiguous()``,
``requires_grad`` and the name of ``grad_fn``.  A case that raises in torch must raise the same
exception type with the same text in daskgrad ("torch" read as "daskgrad")."""
import re

import dask
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

CHUNKINGS = ("one", "even", "uneven", "size1")
A = np.arange(24, dtype=np.float64).reshape(6, 4) / 4 - 2  # (6, 4), as the other op tests
S = np.arange(16, dtype=np.float64).reshape(4, 4) / 3 - 1  # square, for diagonals and x + x.T
V = np.array([1.0, 2.0, 3.0, -1.0, 0.5, 4.0])


def _chunks(shape, chunking):
    """Per-axis chunks for ``chunking``: one chunk, two even ones, two uneven ones, or size-1 chunks."""
    def axis(n):
        if chunking == "one" or n < 2:
            return (n,)
        if chunking == "even":
            return (n // 2, n - n // 2)
        if chunking == "uneven":
            return (n - n // 3, n // 3)
        return (1,) * n
    return tuple(axis(n) for n in shape)


def _maker(L, chunking):
    def make(values, requires_grad=False):
        values = np.asarray(values, dtype=np.float64)
        if L is torch:
            return torch.tensor(values, requires_grad=requires_grad)
        return dg.from_array(values, chunks=_chunks(values.shape, chunking), requires_grad=requires_grad)
    return make


def _node_name(t):
    return None if t.grad_fn is None else type(t.grad_fn).__name__


def _describe(results):
    tensors = {id(v): k for k, v in results.items() if isinstance(v, (torch.Tensor, dg.Tensor))}
    out = {}
    for k, v in results.items():
        if isinstance(v, (torch.Tensor, dg.Tensor)):
            base = v._base
            # (a gradient's _version tells how torch's engine accumulated it: not compared)
            version = None if k.endswith("grad") or k in ("g", "gg") else v._version
            out[k] = {"values": np.asarray(v.detach().numpy()), "shape": tuple(v.shape), "version": version,
                      "is_view": v._is_view(), "base": None if base is None else tensors.get(id(base), "another"),
                      "contiguous": v.is_contiguous(), "requires_grad": v.requires_grad, "grad_fn": _node_name(v)}
        else:
            out[k] = v
    return out


def _run(case, L, chunking):
    try:
        return "ok", _describe(case(L, _maker(L, chunking)))
    except Exception as e:  # noqa: BLE001 - the oracle's error is part of the answer
        return "error", (type(e), str(e))


def _same(case, chunking):
    kind, expected = _run(case, torch, chunking)
    got_kind, got = _run(case, dg, chunking)
    if kind == "error":
        assert got_kind == "error", f"torch raises {expected}, daskgrad returns {got}"
        torch_type, text = expected
        assert issubclass(got[0], torch_type) and got[0].__name__ == torch_type.__name__, (got, expected)
        assert got[1] == text.replace("torch", "daskgrad"), f"\n{got[1]}\n{text}"
        return
    assert got_kind == "ok", f"daskgrad raises {got}, torch returns {expected}"
    assert got.keys() == expected.keys()
    for k, want in expected.items():
        have = got[k]
        if isinstance(want, dict):
            np.testing.assert_allclose(have.pop("values"), want.pop("values"), rtol=1e-12, atol=1e-12, err_msg=k)
            assert have == want, (k, have, want)
        else:
            assert have == want, (k, have, want)


# ------------------------------------------------------------------ writes through views reach the base
def write_index_of_index(L, make):
    t = make(A)
    t[0][1] = 7.0
    return {"t": t}


def write_slice_with_a_tensor(L, make):
    t = make(A)
    v = t[1:4, 1:]
    v[0] = make([10.0, 20.0, 30.0])
    return {"t": t, "v": v}


def view_add_(L, make):
    t = make(A)
    v = t.view(-1)
    v.add_(1.0)
    return {"t": t, "v": v}


def view_made_before_base_write_sees_it(L, make):
    t = make(A)
    v = t.view(-1)
    r = t[2]
    t.mul_(2.0)
    return {"t": t, "v": v, "r": r}


def transposed_view_add_(L, make):
    t = make(A)
    tt = t.T
    tt.add_(make(A.T * 10))
    return {"t": t, "tt": tt}


def permute_then_row_fill_(L, make):
    t = make(A)
    p = t.permute(1, 0)
    p[1].fill_(5.0)
    return {"t": t, "p": p}


def swapaxes_zero_(L, make):
    t = make(A)
    s = t.swapaxes(0, 1)
    s[2:].zero_()
    return {"t": t, "s": s}


def mT_write(L, make):
    t = make(A)
    m = t.mT
    m[:, 0] = -1.0
    return {"t": t, "m": m}


def unsqueeze_write(L, make):
    t = make(A)
    u = t.unsqueeze(0)
    u[0, 1].fill_(3.0)
    return {"t": t, "u": u}


def none_index_write(L, make):
    t = make(A)
    u = t[:, None]
    u[2, 0, 1:3] = 9.0
    return {"t": t, "u": u}


def squeeze_of_a_view_iadd(L, make):
    t = make(A)
    s = t.view(1, 6, 4).squeeze(0)
    row = s[1]
    row += 1.0
    return {"t": t, "s": s, "row": row}


def diagonal_fill_(L, make):
    t = make(S)
    d = t.diagonal()
    d.fill_(0.0)
    return {"t": t, "d": d}


def diagonal_offset_copy_(L, make):
    t = make(S)
    d = t.diagonal(1)
    d.copy_(make([1.0, 2.0, 3.0]))
    e = t.diagonal(-2)
    e.mul_(10.0)
    return {"t": t, "d": d, "e": e}


def reshape_that_views_writes_through(L, make):
    t = make(A)
    r = t.reshape(3, 8)
    r[1] = 0.0
    return {"t": t, "r": r}


def reshape_of_a_transposed_tensor_copies(L, make):
    t = make(A)
    r = t.T.reshape(-1)
    r[0] = 99.0
    return {"t": t, "r": r}


def flatten_and_ravel_of_a_contiguous_tensor_view(L, make):
    t = make(A)
    f = t.flatten()
    f[3] = -7.0
    r = t.ravel()
    r[5:7] = 8.0
    return {"t": t, "f": f, "r": r}


def unflatten_view(L, make):
    t = make(A)
    u = t.unflatten(1, (2, 2))
    u[:, 1, 0].fill_(4.0)
    return {"t": t, "u": u}


def movedim_view(L, make):
    t = make(A).view(2, 3, 4)
    m = t.movedim(0, 2)
    m[0, 0].copy_(make([5.0, 6.0]))
    return {"t": t, "m": m}


def chain_of_views(L, make):
    t = make(A)
    c = t[1:][0][::2]
    c.fill_(1.0)
    w = t[1:].view(-1)[2:5]
    w.sub_(0.5)
    return {"t": t, "c": c, "w": w}


def view_of_view_base_is_root(L, make):
    t = make(A)
    a = t[0][1:]
    b = a.view(3, 1).T
    return {"t": t, "a": a, "b": b}


def expand_fill_and_row_write(L, make):
    t = make(V[:4].reshape(1, 4))
    e = t.expand(3, 4)
    e.fill_(2.0)
    e[1] = make([1.0, 2.0, 3.0, 4.0])
    return {"t": t, "e": e}


def expand_add_refused(L, make):
    e = make(V[:4].reshape(1, 4)).expand(3, 4)
    e.add_(1.0)
    return {"e": e}


def expand_setitem_all_refused(L, make):
    e = make(V[:4].reshape(1, 4)).expand(3, 4)
    e[:] = 1.0
    return {"e": e}


def expand_copy_refused(L, make):
    e = make(V[:4].reshape(1, 4)).expand(3, 4)
    e.copy_(make(np.ones((3, 4))))
    return {"e": e}


def advanced_index_copies(L, make):
    t = make(A)
    c = t[[0, 2]]
    c[0] = 100.0
    return {"t": t, "c": c, "mask_is_view": t[t > 0]._is_view(), "list_is_view": t[:, [1]]._is_view()}


def detach_shares_storage(L, make):
    t = make(A)
    d = t.detach()
    d[0] = 5.0
    v = t[1]
    d.mul_(2.0)
    return {"t": t, "d": d, "v": v}


def detached_view_writes_through(L, make):
    t = make(A)
    v = t[2]
    d = v.detach()
    d.mul_(-1.0)
    return {"t": t, "v": v, "d": d}


def version_counter_is_shared(L, make):
    t = make(A)
    a, b = t[0], t.view(-1)
    a.add_(1.0)
    b[3] = 2.0
    t.mul_(3.0)
    c = t[1:]
    return {"t": t, "a": a, "b": b, "c": c, "versions": (t._version, a._version, b._version, c._version)}


def clamp_and_inplace_ops_on_a_view(L, make):
    t = make(A)
    v = t[:, 1:3]
    v.clamp_(-1.0, 1.0)
    w = t[4:]
    w.neg_()
    w.exp_()
    return {"t": t, "v": v, "w": w}


def alias_writes(L, make):
    t = make(A)
    a = t[...]
    a[0, 0] = 42.0
    b = t[None]
    b[0, 5].fill_(-3.0)
    return {"t": t, "a": a, "b": b}


def contiguity(L, make):
    t = make(A)
    x = t.view(2, 3, 4)
    return {"T": t.T.is_contiguous(), "col": t[:, :1].is_contiguous(), "row": t[:1].is_contiguous(),
            "unsqueeze": t.unsqueeze(0).is_contiguous(), "none": t[:, None].is_contiguous(),
            "expand1": t.expand(1, 6, 4).is_contiguous(), "expand": t.expand(2, 6, 4).is_contiguous(),
            "diagonal": t.diagonal().is_contiguous(), "step": t[::2].is_contiguous(),
            "col_T": t[:, 1:2].T.is_contiguous(), "permute": x.permute(0, 2, 1).is_contiguous(),
            "tail": t[1:].is_contiguous(), "inner": t[:, 1:].is_contiguous()}


def contiguous_copies_only_when_needed(L, make):
    t = make(A)
    c = t.T.contiguous()
    c[0] = 0.0
    same = t.contiguous() is t
    return {"t": t, "c": c, "same": same}


def view_of_a_transposed_tensor_refused(L, make):
    t = make(A)
    return {"v": t.T.view(-1)}


def views_that_view_can_make(L, make):
    t = make(A)
    a = t[:, :2].T.view(2, 6)  # (a stride pattern view can still walk)
    b = t[::2].view(3, 2, 2)
    return {"t": t, "a": a, "b": b}


def partial_overlap_copy_refused(L, make):
    x = make(V)
    x[1:].copy_(x[:-1])
    return {"x": x}


def partial_overlap_setitem_refused(L, make):
    x = make(V)
    x[1:] = x[:-1]
    return {"x": x}


def partial_overlap_add_refused(L, make):
    x = make(V)
    x[1:4].add_(x[0:3])
    return {"x": x}


def transposed_operand_refused(L, make):
    s = make(S)
    s.add_(s.T)
    return {"s": s}


def full_overlap_is_fine(L, make):
    x = make(V)
    x.add_(x)
    x[1:].mul_(x[1:])
    x[2:].add_(x[2:].clone())
    return {"x": x}


def unbind_chunk_split_without_grad_write(L, make):
    t = make(A)
    t.unbind()[0].add_(1.0)
    t.chunk(3)[1].mul_(2.0)
    t.split(2, 1)[1].fill_(0.5)
    t.split([1, 5])[0][0, 0] = 11.0
    return {"t": t}


def unbind_split_chunk_pieces(L, make):
    t = make(A)
    out = {"t": t}
    for name, pieces in (("chunk", t.chunk(4)), ("chunk1", t.chunk(3, 1)), ("split", t.split(4, 1)),
                         ("sizes", t.split([1, 2, 3])), ("unbind", t.unbind(1))):
        out.update((f"{name}{k}", p) for k, p in enumerate(pieces))
    return out


def narrow_and_select_views(L, make):
    t = make(A)
    n = t.narrow(1, 1, 2)
    n.fill_(0.0)
    s = t.select(0, 3)
    s.add_(1.0)
    return {"t": t, "n": n, "s": s}


VALUES = [write_index_of_index, write_slice_with_a_tensor, view_add_, view_made_before_base_write_sees_it,
          transposed_view_add_, permute_then_row_fill_, swapaxes_zero_, mT_write, unsqueeze_write, none_index_write,
          squeeze_of_a_view_iadd, diagonal_fill_, diagonal_offset_copy_, reshape_that_views_writes_through,
          reshape_of_a_transposed_tensor_copies, flatten_and_ravel_of_a_contiguous_tensor_view, unflatten_view,
          movedim_view, chain_of_views, view_of_view_base_is_root, expand_fill_and_row_write, expand_add_refused,
          expand_setitem_all_refused, expand_copy_refused, advanced_index_copies, detach_shares_storage,
          detached_view_writes_through, version_counter_is_shared, clamp_and_inplace_ops_on_a_view, alias_writes,
          contiguity, contiguous_copies_only_when_needed, view_of_a_transposed_tensor_refused,
          views_that_view_can_make, partial_overlap_copy_refused, partial_overlap_setitem_refused,
          partial_overlap_add_refused, transposed_operand_refused, full_overlap_is_fine,
          unbind_chunk_split_without_grad_write, unbind_split_chunk_pieces, narrow_and_select_views]


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", VALUES, ids=lambda c: c.__name__)
def test_a_write_through_a_view_gives_torch_s_values_versions_and_layout(case, chunking):
    _same(case, chunking)


# ------------------------------------------------------------------------------ autograd through views
def issue_example_mul_through_a_slice(L, make):
    x = make([1.0, 2.0, 3.0], requires_grad=True)
    y = x.clone()
    v = y[1:]
    v.mul_(3.0)
    (y * y).sum().backward()
    return {"x_grad": x.grad, "y": y, "v": v}


def base_write_rewrites_the_views_history(L, make):
    x = make(A, requires_grad=True)
    y = x * 1.0
    v, u = y.view(-1), y[0]
    y.mul_(2.0)
    (v[:4] * u).sum().backward()
    return {"x_grad": x.grad, "y": y, "v": v, "u": u}


def transposed_row_copied_from_a_tensor_that_requires_grad(L, make):
    x = make(A, requires_grad=True)
    z = make(V, requires_grad=True)
    y = x * 2.0
    r = y.T[1]
    r.copy_(z * z)
    (y ** 2).sum().backward()
    return {"x_grad": x.grad, "z_grad": z.grad, "y": y, "r": r}


def base_without_grad_gets_it_through_a_view(L, make):
    w = make(V[:3], requires_grad=True)
    b = make(np.zeros(3))
    v, u = b[0:2], b[2:]
    v.copy_(w[:2] * 3.0)
    (b * make([1.0, 2.0, 3.0])).sum().backward()
    return {"w_grad": w.grad, "b": b, "v": v, "u": u, "b_is_leaf": b.is_leaf}


def setitem_of_a_leaf_without_grad_with_a_value_that_requires_it(L, make):
    w = make(V[:4], requires_grad=True)
    b = make(np.zeros((2, 4)))
    b[1] = w.exp()
    b.sum().backward()
    return {"w_grad": w.grad, "b": b}


def diagonal_mul_(L, make):
    x = make(S, requires_grad=True)
    y = x + 0.0
    d = y.diagonal()
    d.mul_(d.detach() + 2.0)
    (y.sin()).sum().backward()
    return {"x_grad": x.grad, "y": y, "d": d}


def strided_view_of_a_reshape(L, make):
    x = make(A, requires_grad=True)
    z = make(np.linspace(-1, 1, 12), requires_grad=True)
    y = x.exp()
    w = y.view(-1)[::2]
    w.add_(z * z)
    (y * x).sum().backward()
    return {"x_grad": x.grad, "z_grad": z.grad, "y": y, "w": w}


def expanded_view_fill_of_a_non_leaf(L, make):
    x = make(A, requires_grad=True)
    y = x * 3.0
    e = y[0:1].expand(4, 4)
    e.fill_(0.0)
    (y * y).sum().backward()
    return {"x_grad": x.grad, "y": y, "e": e}


def two_writes_through_two_views(L, make):
    x = make(A, requires_grad=True)
    y = x.clone()
    a, b = y[:, 0], y[2:].T
    a.mul_(x[:, 1])
    b[1].add_(a[2:] ** 2)
    y.sum().backward()
    return {"x_grad": x.grad, "y": y, "a": a, "b": b}


def retain_grad_of_a_written_view(L, make):
    x = make(V, requires_grad=True)
    y = x * 1.0
    v = y[2:]
    v.retain_grad()
    v.mul_(2.0)
    (v * v).sum().backward()
    return {"x_grad": x.grad, "v_grad": v.grad, "v": v}


def double_backward_through_copyslices(L, make):
    x = make(V[:4], requires_grad=True)
    y = x.clone()
    y[1:].mul_(x[:3])
    (g,) = L.autograd.grad((y ** 3).sum(), x, create_graph=True)
    (gg,) = L.autograd.grad(g.sum(), x)
    return {"g": g, "gg": gg}


def write_under_no_grad_keeps_the_history(L, make):
    w = make(V, requires_grad=True)
    v = w[0:2]
    with L.no_grad():
        w[4:].mul_(2.0)
    (v * 5.0).sum().backward()
    return {"w_grad": w.grad, "w": w, "v": v}


def no_grad_writes_through_views_of_a_leaf(L, make):
    w = make(V, requires_grad=True)
    with L.no_grad():
        w[0] = 1.0
        w[:2].add_(1.0)
        w.view(2, 3).T[2].mul_(0.0)
    return {"w": w}


def in_place_ops_after_one_that_saved_self(L, make):
    """torch saves a copy of the original self for an in-place op whose derivative reads it: later
    writes do not touch it."""
    x = make(V, requires_grad=True)
    w = make(V[::-1].copy(), requires_grad=True)
    y = x.clone()
    y.mul_(w)
    y.pow_(2)
    y[1:].div_(w[1:])
    y.add_(1.0)
    y.sum().backward()
    return {"x_grad": x.grad, "w_grad": w.grad, "y": y}


def gradients_alias_nothing(L, make):
    x = make(A, requires_grad=True)
    y = x.view(24)
    y.retain_grad()
    (y * y).sum().backward()
    x.grad.zero_()
    return {"x_grad": x.grad, "y_grad": y.grad}


def view_kept_after_its_base_was_detached_and_written(L, make):
    """torch rebuilds the view's history onto its base, which after ``detach_()`` leads nowhere: the view
    still requires grad, and nothing reaches the leaf (daskgrad's view kept its old history: a gradient)."""
    a = make(V, requires_grad=True)
    b = a * 2.0
    v = b[1:]
    b.detach_()
    b.mul_(3.0)
    (v * 2.0).sum().backward()
    return {"a_grad": a.grad, "v": v, "b": b, "fresh_view": b[2:]}


def hooks_of_a_view_written_in_place(L, make):
    """torch's CopySlices steps over the view's old node: a hook registered on the view before its write
    never fires (daskgrad's write read through that node: the hook fired and scaled the gradient); a hook
    on a plain tensor written in place fires with the gradient of its old value."""
    a = make(V, requires_grad=True)
    b = a * 2.0
    v = b[1:]
    seen = []
    v.register_hook(lambda g: seen.append(1) or g * 10.0)
    before = v * 5.0  # (read before the write: the hook fires for this use, as torch's)
    v.mul_(3.0)
    v.register_hook(lambda g: seen.append(2) or g * 10.0)
    v.add_(1.0)
    x = a * 3.0
    x.register_hook(lambda g: seen.append(3) or g * 10.0)
    x.mul_(2.0)
    (b.sum() + x.sum() + before.sum()).backward()
    return {"a_grad": a.grad, "seen": L.tensor(sorted(seen) + [0])}


def hooks_of_a_view_whose_sub_view_is_written(L, make):
    """torch's CopySlices steps over the old nodes of every view between the written one and the base: a hook
    (and a node hook) on ``v`` fires for the uses of ``v`` before ``v[:1]``'s write only (daskgrad's write read
    through ``v``'s old node: its hooks saw the write's gradient)."""
    a = make(V, requires_grad=True)
    b = a * 2.0
    v = b[1:]
    w = v[1:]
    seen = []
    v.register_hook(lambda g: seen.append(g.sum().item()) or g * 10.0)
    v.grad_fn.register_hook(lambda gi, go: seen.append(100 + go[0].sum().item()))
    w.register_hook(lambda g: seen.append(1000 + g.sum().item()) or g * 10.0)
    before = (v * 3.0).sum()
    v[:1].mul_(2.0)
    w[:1].add_(1.0)
    (b.sum() + before + (v * 5.0).sum() + (w * 7.0).sum()).backward()
    return {"a_grad": a.grad, "seen": L.tensor(sorted(seen) + [0.0])}


AUTOGRAD = [hooks_of_a_view_written_in_place, hooks_of_a_view_whose_sub_view_is_written,
            view_kept_after_its_base_was_detached_and_written,
            in_place_ops_after_one_that_saved_self, gradients_alias_nothing, issue_example_mul_through_a_slice,
            base_write_rewrites_the_views_history,
            transposed_row_copied_from_a_tensor_that_requires_grad, base_without_grad_gets_it_through_a_view,
            setitem_of_a_leaf_without_grad_with_a_value_that_requires_it, diagonal_mul_, strided_view_of_a_reshape,
            expanded_view_fill_of_a_non_leaf, two_writes_through_two_views, retain_grad_of_a_written_view,
            double_backward_through_copyslices, write_under_no_grad_keeps_the_history,
            no_grad_writes_through_views_of_a_leaf]


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", AUTOGRAD, ids=lambda c: c.__name__)
def test_a_write_through_a_view_gives_torch_s_history_and_gradients(case, chunking):
    _same(case, chunking)


# ------------------------------------------------------------------------------------- torch's errors
def leaf_view_setitem(L, make):
    w = make(V, requires_grad=True)
    w[0] = 1.0


def leaf_slice_add_(L, make):
    w = make(V, requires_grad=True)
    w[:2].add_(1.0)


def leaf_reshape_view_add_(L, make):
    w = make(V, requires_grad=True)
    w.view(2, 3).add_(1.0)


def leaf_transposed_view_fill_(L, make):
    w = make(A, requires_grad=True)
    w.T.fill_(1.0)


def leaf_expanded_row_add_(L, make):
    w = make(V, requires_grad=True)
    w.expand(2, 6)[0].add_(1.0)


def leaf_detached_write_is_allowed(L, make):
    w = make(V, requires_grad=True)
    w.detach()[0] = 1.0
    return {"w": w}


def no_grad_view_written_with_grad(L, make):
    y = make(V, requires_grad=True).clone()
    with L.no_grad():
        v = y[0:2]
    v.mul_(2.0)


def no_grad_view_of_a_leaf_written_with_grad(L, make):
    w = make(V, requires_grad=True)
    with L.no_grad():
        v = w[1:]
    v.zero_()


def unbind_output_written(L, make):
    y = make(V, requires_grad=True).clone()
    y.unbind()[3].mul_(2.0)


def split_output_written(L, make):
    y = make(V, requires_grad=True).clone()
    y.split(4)[1].mul_(2.0)


def split_with_sizes_output_written(L, make):
    y = make(V, requires_grad=True).clone()
    y.split([2, 4])[1][0] = 1.0


def chunk_output_written(L, make):
    y = make(A, requires_grad=True) * 1.0
    y.chunk(2, 1)[1].add_(1.0)


def view_of_an_unbind_output_written(L, make):
    y = make(V, requires_grad=True).clone()
    y.unbind()[0][None].mul_(2.0)


def unbind_output_of_a_leaf_written(L, make):
    make(V, requires_grad=True).unbind()[0].mul_(2.0)


def unbind_output_written_under_no_grad(L, make):
    y = make(V, requires_grad=True).clone()
    p = y.unbind()
    with L.no_grad():
        p[0].mul_(2.0)
    return {"y": y}


def unbind_output_of_a_detached_output_written(L, make):
    y = make(V, requires_grad=True).clone()
    y.unbind()[0].detach().mul_(2.0)
    return {"y": y}


def saved_output_written_through_a_view(L, make):
    x = make(V, requires_grad=True)
    s = x.exp()
    s[1:].mul_(2.0)
    (s * 1.0).sum().backward()


def saved_input_written_through_a_view(L, make):
    y = make(V, requires_grad=True).clone()
    v = y[1:]
    s = y.sin()
    v.mul_(2.0)
    s.sum().backward()


def saved_view_written_through_its_detached_alias(L, make):
    y = make(V, requires_grad=True).clone()
    v = y[0:2]
    s = v * v
    v.detach().mul_(2.0)
    s.sum().backward()


def saved_base_written_in_place(L, make):
    y = make(V, requires_grad=True).clone()
    s = y.sin()
    y.mul_(2.0)
    s.sum().backward()


def saved_leaf_written_through_a_view_under_no_grad(L, make):
    w = make(V, requires_grad=True)
    s = (w * w).sum()
    with L.no_grad():
        w[1:3].zero_()
    s.backward()


def saved_other_operand_is_the_tensor_written(L, make):
    y = make(V, requires_grad=True).clone()
    y.mul_(y)
    y.sum().backward()


def saved_result_written_again(L, make):
    y = make(V, requires_grad=True).clone()
    y.exp_()
    y[2:].add_(1.0)
    y.sum().backward()


def detach_in_place_of_a_view(L, make):
    make(A)[0].detach_()


ERRORS = [leaf_view_setitem, leaf_slice_add_, leaf_reshape_view_add_, leaf_transposed_view_fill_,
          leaf_expanded_row_add_, leaf_detached_write_is_allowed, no_grad_view_written_with_grad,
          no_grad_view_of_a_leaf_written_with_grad, unbind_output_written, split_output_written,
          split_with_sizes_output_written, chunk_output_written, view_of_an_unbind_output_written,
          unbind_output_of_a_leaf_written, unbind_output_written_under_no_grad,
          unbind_output_of_a_detached_output_written, saved_output_written_through_a_view,
          saved_input_written_through_a_view, saved_view_written_through_its_detached_alias,
          saved_base_written_in_place, saved_leaf_written_through_a_view_under_no_grad,
          saved_other_operand_is_the_tensor_written, saved_result_written_again, detach_in_place_of_a_view]


@pytest.mark.parametrize("case", ERRORS, ids=lambda c: c.__name__)
def test_an_in_place_write_torch_refuses_raises_torch_s_error(case):
    _same(lambda L, make: case(L, make) or {}, "uneven")


# ------------------------------------------- where torch raises at the next use, daskgrad at backward
def _torch_error(fn):
    with pytest.raises(RuntimeError) as e:
        fn()
    return str(e.value).replace("torch", "daskgrad")


def test_an_unbind_output_used_after_its_base_was_written_refuses_backward_with_torch_s_text():
    def program(L, make):
        y = make(V, requires_grad=True).clone()
        p = y.unbind()
        y.mul_(2.0)
        return (p[0] * 2.0).sum()

    text = _torch_error(lambda: program(torch, _maker(torch, "one")))
    out = program(dg, _maker(dg, "uneven"))
    with pytest.raises(RuntimeError, match=re.escape(text)):
        out.backward()


def test_a_no_grad_view_used_after_its_base_was_written_refuses_backward_with_torch_s_text():
    def program(L, make):
        w = make(V, requires_grad=True)
        with L.no_grad():
            v = w[0:2]
            w.mul_(2.0)
        return (v * 2.0).sum()

    text = _torch_error(lambda: program(torch, _maker(torch, "one")))
    out = program(dg, _maker(dg, "even"))
    with pytest.raises(RuntimeError, match=re.escape(text)):
        out.backward()


def test_a_view_reads_its_base_s_new_value_without_rebuilding_it_each_time():
    t = dg.from_array(A, chunks=(3, 2))
    v = t[1:, 2]
    t.add_(1.0)
    first = v.array
    assert v.array is first  # built once per write, then read as it is
    v.numpy()
    assert v.array is v.array
    t.mul_(2.0)
    assert v.array is not first
    np.testing.assert_array_equal(v.numpy(), (A[1:, 2] + 1) * 2)


def test_writes_through_views_compute_nothing_until_a_value_is_asked_for():
    reads = []

    def counted(block):
        reads.append(block.shape)
        return block

    x = dg.from_array(da.from_array(A, chunks=(3, 2)).map_blocks(counted, meta=np.array(())), requires_grad=True)
    y = x * 2.0
    y[1:].T[0].mul_(3.0)
    y.diagonal().zero_()
    y.view(-1)[::5].add_(1.0)
    assert not reads
    want = A * 2.0
    want[1:, 0] *= 3.0
    want[range(4), range(4)] = 0.0
    want.reshape(-1)[::5] += 1.0
    np.testing.assert_allclose(y.detach().numpy(), want)
    assert reads


def _writes_through_views(make):
    """Writes through every kind of view, with gradients: what must stay on the chunks' device."""
    x = make(S)
    x.requires_grad_()
    y = x * 2.0
    y[1:].T[0].mul_(3.0)
    y.diagonal(1).fill_(0.5)
    y.view(-1)[::3].add_(1.0)
    e = y[0:1].expand(3, 4)
    e[2, 1:] = y[3, 1:] * 2.0
    y.unsqueeze(0)[0, 2].copy_(x[1])
    (y * y).sum().backward()
    return [y.detach(), x.grad]


def test_writes_through_views_keep_chunks_on_their_device():
    """On StrictArray chunks (which fail as cupy's do on a host conversion or a host operand): the
    same numbers as on NumPy chunks, and every result on strict chunks."""
    from strict_array import StrictArray, to_strict

    host = _writes_through_views(lambda v: dg.from_array(v, chunks=(3, 2)))
    device = _writes_through_views(lambda v: to_strict(dg.from_array(v, chunks=(3, 2))))
    for a, b in zip(host, device):
        assert isinstance(b.array._meta, StrictArray)
        blocks = dask.compute(*b.array.to_delayed().ravel())
        assert all(isinstance(blk, StrictArray) for blk in blocks)
        np.testing.assert_allclose(a.numpy(), b.array.map_blocks(lambda s: s.get(), meta=np.empty(0)).compute())
