"""Differences from torch a differential fuzz left (s62), each against torch: a number's remainder by a tensor
has no derivative, writes into a view of an op that returns several views (or a view of a no_grad view) raise
torch's errors with its words, methods called without their arguments raise torch's TypeError, bools refused
by ``absolute`` and ``**``, ``householder_product`` with no reflector gives no gradient, and ops after a boolean
mask (a length not known on the client) computed lazily."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def _outcome(fn, lib):
    try:
        out = fn(lib)
    except Exception as e:  # noqa: BLE001 - compared
        return type(e), str(e)
    return "ok", out


def _same_error(fn):
    theirs, ours = _outcome(fn, torch), _outcome(fn, dg)
    assert theirs[0] is not "ok", theirs  # noqa: F632 - a str constant
    assert ours == theirs


@pytest.mark.parametrize("number", [2.0, 2, -1.5])
def test_a_number_s_remainder_by_a_tensor_has_no_derivative_as_torch(number):
    """torch's remainder.Scalar_Tensor has no derivative: its node is NotImplemented and a backward through it
    raises; a gradient was computed here."""
    for lib in (torch, dg):
        x = lib.tensor([1.5, 2.5], requires_grad=True)
        y = number % x
        assert type(y.grad_fn).__name__ == "NotImplemented" and y.requires_grad
        with pytest.raises(RuntimeError, match="^derivative for aten::remainder is not implemented$"):
            y.sum().backward()
        y = lib.remainder(number, x)
        assert type(y.grad_fn).__name__ == "NotImplemented"
    xd, xt = dg.tensor([1.5, 2.5], requires_grad=True), torch.tensor([1.5, 2.5], requires_grad=True)
    np.testing.assert_array_equal((number % xd).detach().numpy(), (number % xt).detach().numpy())
    (dg.tensor(float(number)) % xd).sum().backward()  # (a 0-d tensor: torch's remainder.Tensor, differentiable)
    (torch.tensor(float(number)) % xt).sum().backward()
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())
    assert (number % dg.tensor([1.5])).grad_fn is None


_WRITES = ["copy_(v)", "add_(v)", "mul_(v)", "__setitem__(0, v[0])", "__setitem__(slice(0, 2), v[:2])",
           "__setitem__(Ellipsis, v)", "__setitem__(lib.tensor([0, 1]), v[:2])", "fill_(v[0])", "zero_()",
           "mul_(2)"]
_OUTPUTS = ["b.unbind()[1]", "b.split(1)[0][0]", "b.chunk(2)[1][0]", "b.unbind()[0][0:]", "b.split([1, 1])[1].view(3)"]


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("write", _WRITES)
@pytest.mark.parametrize("output", _OUTPUTS)
def test_writing_a_value_that_requires_grad_into_an_output_of_unbind_raises_torch_s_error(output, write, dtype):
    """The base does not require grad, the value written does: torch refuses (its view has no node, so its words
    say the view was made in no_grad mode); a copy into integers takes no gradient and is allowed, as torch's."""
    def run(lib):
        b = lib.arange(6).reshape(2, 3).to(getattr(lib, dtype))
        v = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        eval(f"({output}).{write}", {"b": b, "v": v, "lib": lib})
        return b.tolist()
    theirs, ours = _outcome(run, torch), _outcome(run, dg)
    if theirs[0] == "ok" or ours[0] == "ok":  # (an integer result type: its error, if any, after torch's check)
        assert ours == theirs
    else:
        assert ours[0] is theirs[0] and (ours[1] == theirs[1] or "result type" in ours[1] + theirs[1])


def _no_grad_view(lib, base, make):
    with lib.no_grad():
        return make(base)


@pytest.mark.parametrize("then", ["[...]", "[1:]", "[None]", "[0]", ".T", ".view(3)", ".unsqueeze(0)", ".expand(3)",
                                  ".unbind()[0]", ".split(1)[0]", ".narrow(0, 1, 1)", ".movedim(0, 0)", ""])
@pytest.mark.parametrize("first", ["unbind", "select"])
def test_a_view_of_a_no_grad_view_written_in_place_raises_torch_s_words(first, then):
    """torch names the view's own op (``Output 0 of Slice is a view of a view which was created in no_grad mode
    ...``), and an output of unbind or split made in grad mode says so, whatever its base's mode."""
    def run(lib):
        x = lib.arange(6.0).reshape(2, 3).requires_grad_(True) * 1
        v = _no_grad_view(lib, x, (lambda t: t.unbind()[0]) if first == "unbind" else (lambda t: t[0]))
        w = eval(f"v{then}", {"v": v})
        if then == ".T":
            w = v.permute(0)
        w.mul_(2)
    _same_error(run)


def test_a_base_written_after_its_unbind_whose_outputs_had_no_node_names_them_as_torch_at_backward():
    """Used after the write, the view raises torch's words at backward (torch raises at the use: documented)."""
    messages = []
    for lib in (torch, dg):
        b = lib.zeros(2, 3)
        views = b.unbind()
        b.mul_(lib.ones(3, requires_grad=True))
        with pytest.raises(RuntimeError) as e:
            views[0].sum().backward()
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("A view was created in no_grad mode and its base or another view of its base has "
                                  "been modified inplace with grad mode enabled.")


@pytest.mark.parametrize("call", ["permute()", "view()", "reshape()", "expand()", "repeat()", "tile()", "flip()",
                                  "transpose()", "swapaxes()", "swapdims()", "movedim()", "moveaxis()", "narrow()",
                                  "unsqueeze()", "roll()", "sum_to_size()", "new_zeros()", "new_ones()", "new_empty()",
                                  "new_full()", "cumsum()", "cumprod()", "softmax()", "log_softmax()", "logsumexp()",
                                  "cumsum_()", "cumprod_()", "transpose_()", "view(1, 2, dtype=lib.float32)"])
@pytest.mark.parametrize("shape", [(), (2, 3), (0,)])
def test_a_method_called_without_its_arguments_raises_torch_s_type_error(call, shape):
    """``x.permute()`` of a 0-d tensor returned it, ``x.reshape()`` said the shape ``[]`` was invalid: torch's
    TypeError, its words."""
    def run(lib):
        x = lib.ones(shape)
        return eval(f"x.{call}", {"x": x, "lib": lib})
    if call.startswith("view(1"):
        assert type(_outcome(run, dg)[1]) is not str or _outcome(run, dg)[0] is TypeError
        return
    _same_error(run)
    x = dg.ones(2, 3)  # (with their arguments, by keyword too, they compute as before)
    assert x.permute(dims=(1, 0)).shape == x.reshape(shape=(3, 2)).shape == x.view(size=(3, 2)).shape == (3, 2)
    assert x.transpose(dim0=0, dim1=1).shape == (3, 2) and x.cumsum(dim=1).shape == (2, 3)
    assert x.view(dtype=dg.int32).shape == (2, 3)


@pytest.mark.parametrize("call", ["x.absolute()", "x.abs_()", "x.absolute_()", "True ** x", "x.__rpow__(True)",
                                  "x ** x"])
@pytest.mark.parametrize("values", [[True, False], True, []])
def test_abs_and_powers_of_bools_are_refused_as_torch(call, values):
    def run(lib):
        x = lib.tensor(values, dtype=lib.bool)
        return eval(call, {"x": x, "lib": lib})
    _same_error(run)
    for lib in (torch, dg):  # (a number's power of bools, or bools to a number's power: integers, computed)
        x = lib.tensor([True, False])
        assert (2 ** x).tolist() == [2, 1] and (x ** 2).tolist() == [1, 0] and (x ** True).tolist() == [True, False]
    assert dg.abs(dg.tensor([True])).tolist() == [True]  # (the module function: NumPy's)


@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
def test_householder_product_without_reflectors_gives_its_inputs_no_gradient_as_torch(needs):
    """torch's node gives neither input a gradient where tau is empty (``.grad`` stays None); A's was zeros."""
    a = np.random.default_rng(0).standard_normal((4, 3))
    grads = []
    for lib in (torch, dg):
        x = lib.tensor(a, requires_grad=needs[0])
        t = lib.tensor(np.zeros(0), requires_grad=needs[1])
        q = lib.linalg.householder_product(x, t)
        assert q.grad_fn.name() == "LinalgHouseholderProductBackward0"
        (q.sum() * x.sum() if needs[0] else q.sum()).backward()
        grads.append([None if g is None else g.numpy() for g in (x.grad, t.grad)])
    for got, want in zip(grads[1], grads[0]):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(dg.linalg.householder_product(dg.tensor(a), dg.tensor(np.zeros(0))).numpy(),
                               torch.linalg.householder_product(torch.tensor(a), torch.zeros(0, dtype=torch.float64)
                                                                ).numpy())


_MASKED = {
    "reshape(-1, 1)": lambda m, x, lib: m.reshape(-1, 1) * lib.tensor([[2.0]]),
    "view(-1)": lambda m, x, lib: m.view(-1),
    "unsqueeze": lambda m, x, lib: m.unsqueeze(0).unsqueeze(-1),
    "squeeze": lambda m, x, lib: m.unsqueeze(1).squeeze(1),
    "outer product": lambda m, x, lib: m.reshape(-1, 1) @ x[0:1, 0:2],
    "broadcast": lambda m, x, lib: m.reshape(-1, 1) + x[0],
    "rows flattened": lambda m, x, lib: x[x[:, 0] > 0].flatten() * 3.0,
    "rows reshaped": lambda m, x, lib: x[x[:, 0] > 0].reshape(-1, 1, 3).sin(),
    "cat": lambda m, x, lib: lib.cat([m, x[0], m * 2]),
    "cat rows": lambda m, x, lib: lib.cat([x[x[:, 1] > 0], x[:1]], 0),
    "max": lambda m, x, lib: m.max(),
    "std": lambda m, x, lib: m.std(),
    "norm": lambda m, x, lib: m.norm(),
    "repeat": lambda m, x, lib: m.repeat(2),
    "mean": lambda m, x, lib: m.mean(),
    "mse_loss": lambda m, x, lib: lib.nn.functional.mse_loss(m, (x * 0.5 + 1.0)[x > 0]),
    "mse_loss sum": lambda m, x, lib: lib.nn.functional.mse_loss(m, (x.detach() * 0.5)[x > 0], reduction="sum"),
}


@pytest.mark.parametrize("name", list(_MASKED))
@pytest.mark.parametrize("chunks", [(1, 3), (2, 2), (2, 3)])
def test_ops_after_a_boolean_mask_compute_lazily_as_torch(name, chunks):
    """After ``x[x > 0]`` the length is not known on the client (dask's NaN): reshapes that keep each block's
    slices (``reshape(-1, 1)``, ``view(-1)``, ``unsqueeze``, a flatten of whole rows), ``cat``, and the gradients
    of ``max``/``std``/``norm`` and broadcasting raised here; each computes lazily, without computing the
    lengths, and its gradient is torch's."""
    a = np.array([[1.0, -2.0, 3.0], [-0.5, 2.0, 4.0], [0.25, -1.0, 5.0]])
    xd, xt = dg.from_array(a, chunks=chunks, requires_grad=True), torch.tensor(a, requires_grad=True)
    yd, yt = _MASKED[name](xd[xd > 0], xd, dg), _MASKED[name](xt[xt > 0], xt, torch)
    np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-12)
    if yt.requires_grad:
        yd.sum().backward()
        yt.sum().backward()
        np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_a_reshape_after_a_boolean_mask_that_regroups_across_blocks_raises_a_clear_error():
    x = dg.from_array(np.arange(12.0).reshape(3, 4), chunks=2)
    m = x[x > 2]
    with pytest.raises(NotImplementedError, match="regroup elements across its blocks"):
        m.reshape(-1, 3)
    assert len(m) == 9 and m.median().item() == 7.0  # (counted where the tensor lives; the rows joined to sort)
    c = dg.tensor(m.numpy())  # (computed: its length known)
    assert c.reshape(-1, 3).shape == (3, 3) and len(c) == 9 and c.median().item() == 7.0


# found by the s62 differential fuzz (unary and binary methods over bool/int64/float32/float64, 0-d and empty)
@pytest.mark.parametrize("call", ["x.cross(x)", "e.kthvalue(1)", "m[:, :0].kthvalue(1)", "v.outer(x0)", "m.outer(v)",
                                  "v.ger(x0)", "m.ger(v)", "x0.diff()", "v.fliplr()", "x0.flipud()", "v.rot90()",
                                  "x0.rot90(1, [0, 0])", "m.rot90(1, [0, 1, 2])", "m.rot90(1, [0, -2])",
                                  "m.rot90(1, [0, 2])", "m.rot90(1, (1, 1))", "True % x", "True // x",
                                  "x.__rmod__(True)", "x.__rfloordiv__(x)", "x.pow_(x)", "v @ 2", "2 @ v", "v @ 2.5",
                                  "x @ b23", "b23 @ b23", "x.cross(v.long())", "m.cross(m.long(), dim=0)",
                                  "v.inner(v.double())", "m.inner(v.double())", "v.ldexp(x)", "x0.mv(v)",
                                  "x0.count_nonzero(1)", "x0.count_nonzero((0, 1))", "v @ np.float32(1.5)",
                                  "np.int64(2) @ v", "lib.ones(2, 1, 3).trace()", "v.trace()"])
def test_more_methods_raise_torch_s_errors(call):
    """``cross`` of bools, ``kthvalue`` of an empty dim, ``outer``/``ger`` of tensors other than vectors (NumPy's
    flattens), ``diff`` of a 0-d tensor, ``fliplr``/``flipud``/``rot90`` with too few dims or bad dims: NumPy's
    errors (or a result) where torch raises its own."""
    def run(lib):
        names = {"x": lib.tensor([True, False, True]), "e": lib.zeros(0), "m": lib.ones(2, 3), "v": lib.ones(3),
                 "x0": lib.tensor(1.5), "b23": lib.ones(2, 3, dtype=lib.bool), "np": np, "lib": lib}
        return eval(call, names)
    _same_error(run)


def test_the_checked_methods_still_compute_as_torch():
    a = np.arange(24.0).reshape(2, 3, 4)
    xd, xt = dg.from_array(a, chunks=2), torch.tensor(a)
    for call in ["x.diff()", "x.diff(dim=1)", "x.diff(1, 0)", "x.fliplr()", "x.flipud()", "x.rot90()",
                 "x.rot90(1, dims=[1, 2])", "x.rot90(-1, [2, 0])", "x[0, 0].outer(x[1, 1])", "x[0, 0].ger(x[1, 1])",
                 "x[0].kthvalue(2, 0).values"]:
        np.testing.assert_array_equal(eval(call, {"x": xd}).numpy(), eval(call, {"x": xt}).numpy())
    assert dg.outer(dg.ones(2, 2), dg.ones(3)).shape == (4, 3)  # (the module function: NumPy's, flattening)


def test_more_methods_compute_as_torch():
    """An empty integer tensor divided by zero (torch divides nothing, and raises nothing), a 0-d
    ``count_nonzero(0)``, ``unique``'s NaNs (each distinct in torch's), ``ldexp`` of an integer or bool base by
    bools, a bool's power of a number."""
    for call in ["lib.tensor([], dtype=lib.int64) % 0", "lib.tensor([], dtype=lib.int64) // lib.tensor(0)",
                 "lib.zeros(0, 2, dtype=lib.int64).fmod(lib.zeros(2, dtype=lib.int64))",
                 "lib.tensor(2.0).count_nonzero(0)", "lib.tensor(0.0).count_nonzero(-1)",
                 "lib.tensor([7.0, nan, nan, 1.0, nan]).unique()",
                 "lib.tensor([7.0, nan, nan, 1.0, nan]).unique(return_counts=True)[1]",
                 "lib.tensor([7.0, nan, nan]).unique(return_inverse=True)[1]", "lib.tensor(3).ldexp(lib.tensor(True))",
                 "lib.tensor([True]).ldexp(lib.tensor([True]))", "lib.tensor([True]).pow_(True)"]:
        want = eval(call, {"lib": torch, "nan": np.nan})
        got = eval(call, {"lib": dg, "nan": np.nan})
        assert str(got.dtype) == str(want.dtype).split(".")[-1], call
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert dg.unique(dg.tensor([1.0, np.nan, np.nan])).numpy().shape == (2,)  # (the module function: NumPy's)


@pytest.mark.parametrize("call", ["x0.diagonal()", "v.diagonal()", "v.diagonal(0, 0, -1)", "x0.diagonal(0, -1, -2)",
                                  "m.diagonal(0, 0, 2)", "x0.diag_embed()", "x0.diag_embed(0, 0, 1)",
                                  "x0.diag_embed(0, -1, 0)", "x0.cholesky_inverse()", "v.cholesky_inverse()",
                                  "m.cholesky_inverse()", "v.mT", "v.mH", "v.adjoint()", "v.H"])
def test_dims_of_too_few_dims_raise_torch_s_errors(call):
    def run(lib):
        return eval(call, {"x0": lib.tensor(1.5), "v": lib.ones(3), "m": lib.ones(2, 3)})
    _same_error(run)


def test_a_zero_dimensional_tensor_s_transposes_are_itself_and_histogram_s_default_bins_as_torch():
    for lib in (torch, dg):
        x = lib.tensor(1.5, requires_grad=True) * 1
        assert x.mT is x and x.mH is x and x.adjoint() is x and x.H is x
        z = lib.tensor(1 + 2j)
        assert z.mH.item() == z.adjoint().item() == z.H.item() == 1 - 2j
    a = np.array([1.0, 2.0, 3.0, 4.0, 2.5], dtype=np.float32)
    ht, hd = torch.tensor(a).histogram(), dg.tensor(a).histogram()
    np.testing.assert_array_equal(hd.hist.numpy(), ht.hist.numpy())
    np.testing.assert_allclose(hd.bin_edges.numpy(), ht.bin_edges.numpy(), rtol=1e-6)
