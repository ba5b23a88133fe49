"""A program's key (daskgrad._dask.lazy.frozen, daskgrad._dask.program.Program.key): equal exactly when
the programs compute the same."""
import functools
import math

import numpy as np
import pytest

import daskgrad as dg
from daskgrad._dask.lazy import NoKey as Unfrozen, frozen
from daskgrad._dask.program import Program


def freeze(v):  # as a compile guard freezes: objects other than functions and types have no key
    return frozen(v, objects=False)


def _kernel_scale(c):
    return lambda a: a * c


def test_numbers_keep_their_type_and_floats_their_sign_and_bits():
    assert len({freeze(v) for v in (1, 1.0, True, 1 + 0j, np.float64(1.0), np.float32(1.0))}) == 6
    assert freeze(0.0) != freeze(-0.0)
    assert freeze(math.nan) == freeze(math.nan)  # the same graph: a NaN constant is instantiated as a NaN constant
    assert freeze(0.1 + 0.2) != freeze(0.3)


def test_containers_dtypes_and_arrays_are_frozen_by_content():
    assert freeze((1, [2, {"a": 3}])) == freeze((1, [2, {"a": 3}]))
    assert freeze((1, 2)) != freeze([1, 2])
    assert freeze(np.dtype("float32")) == freeze(np.dtype("f4")) != freeze(np.dtype("float64"))
    small, large = np.arange(4.0), np.arange(10_000.0)
    assert freeze(small) == freeze(small.copy()) != freeze(small + 1)
    assert freeze(large) == freeze(large.copy()) != freeze(large[::-1].copy())
    assert freeze(small) != freeze(small.astype("float32"))
    records = [np.dtype(("f8", (2,))), np.dtype(("i8", (2,))), np.dtype("V16")]
    assert len({freeze(d) for d in records}) == 3  # one byte layout (|V16), three types
    assert freeze(np.zeros(2, [("x", "f8")])) != freeze(np.zeros(2, [("y", "i8")]))
    with pytest.raises(Unfrozen):
        freeze(np.array([object()]))
    with pytest.raises(Unfrozen):
        freeze(object())


def test_programs_recorded_twice_the_same_way_have_one_key():
    # NumPy's C-dispatched functions and an op's kernels made afresh are frozen as what they compute
    assert freeze(np.transpose) is np.transpose

    def program():
        x = dg.ones((40, 3), chunks=(10, 3), dtype="float64")
        return Program.of([(x.T @ x).sum(axis=0)._storage.value, x.mean()._storage.value]).key

    key = program()
    assert key is not None and hash(key) is not None
    assert program() == key


def test_functions_are_themselves_and_closures_what_they_compute():
    assert freeze(np.add) == freeze(np.add) != freeze(np.subtract)
    assert freeze(_kernel_scale(2.0)) == freeze(_kernel_scale(2.0))  # made afresh each step: one key
    assert freeze(_kernel_scale(2.0)) != freeze(_kernel_scale(3.0))
    assert freeze(functools.partial(np.add, 1)) == freeze(functools.partial(np.add, 1))
    assert freeze(functools.partial(np.add, 1)) != freeze(functools.partial(np.add, 1.0))

    def redefined(a):
        return a + 1
    first = redefined

    def redefined(a):  # noqa: F811 - a notebook cell run again with a new body
        return a + 2
    assert freeze(first) != freeze(redefined)


def test_a_closure_over_a_name_not_assigned_yet_has_no_frozen_form():
    def outer():
        def inner(a):
            return a * later
        with pytest.raises(Unfrozen):
            freeze(inner)
        later = 2.0
        return inner
    assert freeze(outer()) == freeze(outer())


def test_a_closure_naming_a_global_that_was_rebound_computes_with_its_new_value():
    space = {"dg": dg, "np": np}
    exec("SCALE = 2.0\ndef make():\n    k = 1\n    return lambda a: a * SCALE * k\n", space)
    x0 = np.arange(4.0)
    for scale in (2.0, 3.0, 3.0, 2.0):
        space["SCALE"] = scale
        x = dg.from_array(x0, chunks=2)
        assert dg.map_blocks(space["make"](), x, dtype=x.dtype).sum().item() == x0.sum() * scale


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_a_step_whose_constant_changes_sign_of_zero_is_built_again_and_right(zero):
    x = dg.ones(4, chunks=2, dtype="float64", requires_grad=True)
    for c in (0.0, -0.0, zero, 0.0, zero):
        y = x * c
        (y.sum()).backward()
        assert np.array_equal(np.signbit(y.detach().numpy()), np.signbit(np.ones(4) * c))
        assert np.array_equal(np.signbit(x.grad.numpy()), np.signbit(np.ones(4) * c))  # as torch: 1 * c
        x.grad = None


def test_a_loop_with_fresh_closures_each_step_is_instantiated():
    dg.step_cache_clear()
    x0 = np.linspace(0.0, 1.0, 8)
    for step in range(4):
        x = dg.from_array(x0 + step, chunks=4)
        total = (dg.map_blocks(_kernel_scale(3.0), x, dtype=x.dtype) + 1).sum().item()
        assert total == pytest.approx(((x0 + step) * 3.0 + 1).sum(), rel=1e-15)
    assert dg.step_cache_info()["hits"] >= 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_number_arithmetic_reads_is_a_value_of_the_program_not_part_of_its_key(dtype):
    """``x * c`` for a Python float ``c`` reads ``c`` as a 0-d value of x's dtype (NumPy converts the
    number so, NEP 50): the bits are NumPy's, and programs differing only in such numbers share a key
    (Adam's bias correction, a learning-rate schedule: one template for every step)."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(6).astype(dtype)
    x = dg.from_array(xs, chunks=4)
    keys = set()
    for c in (0.1, 1 / 3, -2.5e-7, 1e3):  # (numbers equal in the dtype are one value: 1e30 + 1 is 1e30)
        y = 1.5 - (x * c + 0.25) / (c + 1.0) - c
        keys.add(Program.of([y._storage.value]).key)
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(y.numpy(), 1.5 - (xs * c + 0.25) / (c + 1.0) - c)
    assert len(keys) == 1 and None not in keys
    # an integer tensor times a float is torch's float32 product: the tensor cast, the number a value of it
    ints = dg.from_array(np.arange(6), chunks=4)
    assert Program.of([(ints * 0.5)._storage.value]).key == Program.of([(ints * 0.25)._storage.value]).key
    np.testing.assert_array_equal((ints * 0.5).numpy(), np.arange(6, dtype=np.float32) * np.float32(0.5))
    # where NumPy's conversion is not to the array's dtype the number stays part of the key
    assert Program.of([(ints * 2)._storage.value]).key != Program.of([(ints * 3)._storage.value]).key
    assert Program.of([(x ** 0.5)._storage.value]).key != Program.of([(x ** 0.25)._storage.value]).key


def test_an_adam_loop_whose_bias_correction_changes_every_step_runs_as_one_template():
    from daskgrad import nn, optim

    dg.step_cache_clear()
    dg.manual_seed(0)
    X = dg.from_array(np.random.default_rng(1).standard_normal((32, 3)), chunks=16)
    y = dg.from_array(np.random.default_rng(2).standard_normal(32), chunks=16)
    model = nn.Linear(3, 1).double()
    opt = optim.Adam(model.parameters(), lr=0.01)
    for _ in range(12):
        loss = ((model(X)[:, 0] - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    loss.item()
    info = dg.step_cache_info()
    # the first steps differ (no state yet; values kept from the step before; a template made at the
    # second sight), then each step is an instance of one template (with the numbers as part of the
    # key, none would be)
    assert info["hits"] >= 8 and info["entries"] == 1, info


def test_a_param_array_changed_before_the_submission_is_read_as_it_is_then():
    """An op's params are frozen for the program key at the submission, not at recording: a NumPy array
    param changed in between gives that step's program (a key frozen earlier reused step 1's)."""
    def scaled(a, w):
        return a * w

    x = dg.tensor(np.ones(3))
    for step in range(5):
        w = np.ones(3)
        y = dg.map_blocks(scaled, x, w=w)
        w[:] = step + 1
        np.testing.assert_array_equal(y.numpy(), np.full(3, step + 1.0))


def test_params_that_change_in_place_are_frozen_at_every_submission():
    """A structured NumPy scalar (a view of its array's record), an empty array whose shape is set, and an
    array changed between two submissions that read the same value: each submission reads it as it is then
    (frozen when recorded, a key made with the earlier value reused that program's template)."""
    def by_record(a, w):
        return a * w["a"]

    def by_ndim(a, w):
        return a * w.ndim

    x = dg.tensor(np.ones(3))
    for step in range(4):
        rec = np.zeros(1, dtype=[("a", "f8")])
        y = dg.map_blocks(by_record, x, w=rec[0])
        rec["a"] = step + 1
        np.testing.assert_array_equal(y.numpy(), np.full(3, step + 1.0))
        w = np.zeros((0,))
        y = dg.map_blocks(by_ndim, x, w=w)
        w.shape = (0,) * (step + 1)
        np.testing.assert_array_equal(y.numpy(), np.full(3, step + 1.0))
    for step in range(3):
        w = np.ones(3)
        y = dg.map_blocks(_scaled, x, w=w)
        (y + 1).numpy()  # (y's params frozen by this submission, y not computed)
        w[:] = step + 2
        np.testing.assert_array_equal(y.numpy(), np.full(3, step + 2.0))


def _scaled(a, w):
    return a * w


# ------------------------------------------------------------------ values a key or a name must tell apart
# (found by a differential fuzz of cached against uncached loops: each gave the other value silently)
NAN = float("nan")


def _each_step_cached_and_not(run):
    """``run()``'s values with the step cache and without: the same, whatever the cache kept."""
    import dask

    dg.step_cache_clear()
    cached = run()
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        plain = run()
    return cached, plain


def test_nan_and_minus_nan_are_different_programs():
    """``float.hex`` is ``"nan"`` for every NaN: a key by it gave the third step the first's sign."""
    assert frozen(NAN) != frozen(-NAN) and frozen(complex(1, NAN)) != frozen(complex(1, -NAN))
    x = dg.from_array(np.array([1.0, -2.0, 3.0]), chunks=2)

    def run():
        return [dg.copysign(dg.ones_like(x), dg.full_like(x, c)).numpy() for c in (NAN, NAN, -NAN, -NAN)]

    for got in _each_step_cached_and_not(run):
        for g, c in zip(got, (NAN, NAN, -NAN, -NAN)):
            np.testing.assert_array_equal(g, np.copysign(np.ones(3), c))


def test_nan_and_minus_nan_in_one_program_are_two_values():
    x = dg.from_array(np.array([1.0, 2.0]), chunks=1)
    got = dg.signbit(dg.stack([x * NAN, x * -NAN, dg.where(x > 0, NAN, x), dg.where(x > 0, -NAN, x)])).numpy()
    np.testing.assert_array_equal(got, [[False, False], [True, True], [False, False], [True, True]])


def test_an_array_parameter_and_its_transpose_are_different_programs():
    """dask's token of an array is its bytes in memory order and its shape: ``M`` and ``M.T`` (square, over
    4 kB) had one, as a kernel's keyword (a program's key) and in a layer's name (one program)."""
    m = np.arange(24 * 24.0).reshape(24, 24)
    xn = np.arange(96.0).reshape(4, 24)
    x = dg.from_array(xn, chunks=(2, 24))

    def kern(b, M):
        return b @ M

    def run():
        return [dg.map_blocks(kern, x, M=M).sum().item() for M in (m, m, m.T, m.T)]

    for got in _each_step_cached_and_not(run):
        assert got == [float((xn @ M).sum()) for M in (m, m, m.T, m.T)]
    both = dg.map_blocks(kern, x, M=m).sum() - dg.map_blocks(kern, x, M=m.T).sum()
    assert both.item() == float((xn @ m).sum() - (xn @ m.T).sum()) != 0


def test_int_constants_beyond_float_precision_are_two_values():
    """A constant operand (``value``) was named by its value as a float: 2**53 and 2**53 + 1 were one."""
    x, y = dg.tensor(np.array([1, 2])), dg.tensor(np.array([1, 1]))
    got = (x.addcmul(y, y, value=2 ** 53 + 1) - x.addcmul(y, y, value=2 ** 53)).numpy()  # (torch: [1, 1])
    np.testing.assert_array_equal(got, [1, 1])


def test_alpha_on_operands_whose_chunks_do_not_line_up():
    """An elementwise kernel (``add(alpha=)``) on chunks that differ ran on the whole arrays, reading the
    0-d ``alpha`` as a number: ``Missing dependency``.  Now dask's elemwise rechunks, as for a ufunc."""
    torch = pytest.importorskip("torch")
    xn = np.arange(12.0)
    x = dg.from_array(xn, chunks=7)
    assert x.add(x.flip(0), alpha=2.0).sum().item() == (xn + 2 * xn[::-1]).sum()
    w = dg.tensor(np.ones(12), requires_grad=True)
    h = x * w
    h.add(h.flip(0), alpha=2.0).sum().backward()
    wt = torch.ones(12, dtype=torch.float64, requires_grad=True)
    ht = torch.tensor(xn) * wt
    ht.add(ht.flip(0), alpha=2.0).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), wt.grad.numpy())


def test_an_array_parameter_changed_after_its_steps_is_not_another_steps_value():
    """A template reads the array its first program was lowered with (a kernel's keyword, by reference):
    keyed by its bytes alone, a later step's equal array ran the first one, changed in place since."""
    x = dg.from_array(np.arange(4.0), chunks=2)

    def kern(b, w):
        return b * w[0]

    def run():
        first, later = np.ones(1), np.ones(1)
        got = [dg.map_blocks(kern, x, w=first).sum().item() for _ in range(3)]
        first[0] = 5.0  # the first steps' array, changed after them
        return got + [dg.map_blocks(kern, x, w=later).sum().item() for _ in range(3)]

    def run_views():  # (a read-only view of a writeable array changes with it)
        first, later = np.ones(1), np.ones(1)
        views = first.view(), later.view()
        for v in views:
            v.flags.writeable = False
        got = [dg.map_blocks(kern, x, w=views[0]).sum().item() for _ in range(3)]
        first[0] = 5.0
        return got + [dg.map_blocks(kern, x, w=views[1]).sum().item() for _ in range(3)]

    for got in _each_step_cached_and_not(run) + _each_step_cached_and_not(run_views):
        assert got == [6.0] * 6
    w = dg.tensor(np.arange(6.0), requires_grad=True)
    dg.step_cache_clear()
    for _ in range(4):  # an op's own copy of an index is read-only: keyed by its values, each step an instance
        (w[np.array([0, 2, 2])] ** 2).sum().backward()
    assert dg.step_cache_info()["hits"] >= 1
    np.testing.assert_array_equal(w.grad.numpy(), [0, 0, 32, 0, 0, 0])


def test_a_compiled_call_with_an_equal_array_does_not_replay_another_array():
    """A compiled call's guard named a NumPy argument by its bytes: a call with another array of the first's
    values replayed the trace, whose kernel reads the first array, changed in place since."""
    x = dg.from_array(np.arange(4.0), chunks=2)

    def kern(b, w):
        return b * w[0]

    step = dg.compile(lambda x, w: dg.map_blocks(kern, x, w=w).sum())
    first, later, changing = np.ones(1), np.ones(1), np.ones(1)
    got = [step(x, first).item() for _ in range(3)]
    first[0] = 5.0  # the first calls' array, changed after them
    got += [step(x, later).item() for _ in range(3)]
    for v in (2.0, 2.0, 3.0):  # one array changed in place between calls: its values now, as uncompiled
        changing[0] = v
        got.append(step(x, changing).item())
    assert got == [6.0] * 6 + [12.0, 12.0, 18.0]


def test_a_loop_indexing_new_arrays_is_one_template():
    """An index op's params hold its operand's meta, an empty array made afresh with every array: keyed by
    its shape and dtype, not its identity, so a loop over new arrays is an instance of one template."""
    dg.step_cache_clear()
    for step in range(5):
        x = dg.from_array(np.arange(6.0) + step, chunks=3, requires_grad=True)
        (x[1:4] ** 2).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [0, 2 * (1 + step), 2 * (2 + step), 2 * (3 + step), 0, 0])
    assert dg.step_cache_info()["hits"] >= 3
