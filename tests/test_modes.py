"""The five modes share one machinery (``daskgrad._modes._Mode``): each is a context manager and a
decorator of plain and generator functions, nests, restores, and is thread-local.  The cases follow
PyTorch's test/test_autograd.py (test_no_grad, test_set_grad_enabled, test_enable_grad_decorator_no_paren,
test_set_grad_generator_functions_recursive, test_set_grad_coroutines*, test_inference_mode_*),
run over every mode instead of one."""
import contextlib
import threading
import warnings

import numpy as np
import pytest
import torch

import daskgrad as dg
from daskgrad import _modes


def _quiet_detect_anomaly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dg.autograd.detect_anomaly(*args, **kwargs)


# name: (make the mode, read the state it sets, the value inside, a context setting the opposite value)
MODES = {
    "no_grad": (dg.no_grad, dg.is_grad_enabled, False, lambda: dg.set_grad_enabled(True)),
    "enable_grad": (dg.enable_grad, dg.is_grad_enabled, True, lambda: dg.set_grad_enabled(False)),
    "set_grad_enabled": (lambda: dg.set_grad_enabled(False), dg.is_grad_enabled, False, dg.enable_grad),
    "inference_mode": (dg.inference_mode, dg.is_inference_mode_enabled, True, lambda: dg.inference_mode(False)),
    "detect_anomaly": (_quiet_detect_anomaly, dg.is_anomaly_enabled, True,
                       lambda: dg.autograd.set_detect_anomaly(False)),
}
modes = pytest.mark.parametrize("make, read, inside, outside", MODES.values(), ids=MODES.keys())


def test_every_mode_is_one_base_class():
    for cls in (dg.no_grad, dg.enable_grad, dg.set_grad_enabled, dg.inference_mode,
                dg.autograd.detect_anomaly, dg.autograd.set_detect_anomaly):
        assert issubclass(cls, _modes._Mode) and issubclass(cls, contextlib.ContextDecorator)
    assert dg.autograd.no_grad is dg.no_grad and dg.autograd.detect_anomaly is dg.detect_anomaly


@modes
def test_context_manager_nests_and_restores_even_on_error(make, read, inside, outside):
    with outside():
        with make():
            assert read() == inside
            with make():
                assert read() == inside
            assert read() == inside
        assert read() != inside
        with pytest.raises(KeyError), make():
            raise KeyError
        assert read() != inside


@modes
def test_decorator_on_a_function_keeps_the_callers_mode_across_recursion(make, read, inside, outside):
    @make()
    def f(depth):
        assert read() == inside
        if depth:
            with outside():  # the next call enters afresh: one shared instance would restore wrongly
                f(depth - 1)
                assert read() != inside
            assert read() == inside
        return depth

    with outside():
        assert f(3) == 3 and read() != inside


@modes
def test_decorator_on_a_generator_holds_in_the_body_only(make, read, inside, outside):
    @make()
    def coro(n):
        assert read() == inside
        for i in range(n):
            r = yield i
            assert read() == inside and r == i
        return "done"

    with outside():
        gen, r = coro(4), None
        with pytest.raises(StopIteration) as stop:
            while True:
                r = gen.send(r)
                assert read() != inside
        assert stop.value.value == "done" and read() != inside


@modes
def test_generator_decorator_under_throw_and_close(make, read, inside, outside):
    class Recoverable(Exception):
        pass

    seen = []

    @make()
    def coro():
        for i in range(3):
            try:
                yield i
            except Recoverable:
                seen.append(("throw", read()))
            except GeneratorExit:
                seen.append(("close", read()))
                raise

    with outside():
        gen = coro()
        assert next(gen) == 0
        assert gen.throw(Recoverable) == 1 and read() != inside
        gen.close()
        assert read() != inside
        with pytest.raises(ValueError):
            gen2 = coro()
            next(gen2)
            gen2.throw(ValueError)  # not caught in the body: it propagates, the mode is still undone
        assert read() != inside
    assert seen == [("throw", inside), ("close", inside)]


@modes
def test_mode_is_thread_local(make, read, inside, outside):
    def in_new_thread(fn):
        out = []
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start(), t.join()
        return out[0]

    default = in_new_thread(read)
    entered, release = threading.Barrier(2), threading.Barrier(2)

    def worker():
        with make():
            entered.wait()
            release.wait()

    with outside():
        t = threading.Thread(target=worker)
        t.start()
        entered.wait()
        assert read() != inside  # while the other thread is inside the mode
        release.wait()
        t.join()
        with make():
            assert read() == inside and in_new_thread(read) == default


@pytest.mark.parametrize("mode", [dg.no_grad, dg.enable_grad, dg.inference_mode], ids=["no_grad", "enable_grad",
                                                                                         "inference_mode"])
def test_bare_decorator_without_the_call(mode):
    x = dg.tensor([1.0], requires_grad=True)

    def doubler(t):
        return t * 2, dg.is_grad_enabled()

    with dg.set_grad_enabled(mode is not dg.enable_grad):
        for decorated in (mode(doubler), mode()(doubler)):
            z, grad_inside = decorated(x)
            assert grad_inside is (mode is dg.enable_grad) and z.requires_grad is grad_inside


def test_inference_mode_decorator_with_mode_given_or_as_keyword():
    def func(x):
        return x * x, dg.is_inference_mode_enabled()

    for decorated, mode in ((dg.inference_mode(mode=func), True), (dg.inference_mode(func), True),
                            (dg.inference_mode(mode=True)(func), True), (dg.inference_mode(False)(func), False)):
        for requires_grad in (True, False):
            d, seen = decorated(dg.ones(2, requires_grad=requires_grad))
            assert seen is mode and d.is_inference() is mode and d.requires_grad is (requires_grad and not mode)


def test_inference_mode_false_nests_inside_inference_mode():
    assert not dg.is_inference_mode_enabled()
    with dg.inference_mode():
        assert dg.is_inference_mode_enabled() and not dg.is_grad_enabled()
        with dg.inference_mode(False):
            assert not dg.is_inference_mode_enabled() and dg.is_grad_enabled()
        assert dg.is_inference_mode_enabled()
    assert not dg.is_inference_mode_enabled() and dg.is_grad_enabled()


def test_set_grad_enabled_as_a_call_and_as_a_context():
    x = dg.tensor([1.0], requires_grad=True)
    with dg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    with dg.set_grad_enabled(True):
        assert (x * 2).requires_grad
    with dg.set_grad_enabled(False):
        dg.set_grad_enabled(True)  # a plain call inside wins until the context exits
        assert (x * 2).requires_grad
    assert dg.is_grad_enabled()
    dg.set_grad_enabled(False)
    try:
        assert not dg.is_grad_enabled() and dg.set_grad_enabled(True).mode is True
        assert dg.is_grad_enabled()
    finally:
        dg.set_grad_enabled(True)


def test_set_grad_enabled_used_as_decorator_does_not_leak_its_construction():
    @dg.set_grad_enabled(False)
    def f():
        return dg.is_grad_enabled()

    assert dg.is_grad_enabled() and f() is False and dg.is_grad_enabled()


def test_set_detect_anomaly_as_a_call_and_as_a_context():
    with dg.autograd.set_detect_anomaly(True, check_nan=False):
        assert dg.is_anomaly_enabled() and not dg.is_anomaly_check_nan_enabled()
    assert not dg.is_anomaly_enabled() and dg.is_anomaly_check_nan_enabled()
    dg.autograd.set_detect_anomaly(True)
    try:
        assert dg.is_anomaly_enabled()
    finally:
        dg.autograd.set_detect_anomaly(False)
    assert not dg.is_anomaly_enabled()


def test_detect_anomaly_warns_at_construction_only():
    with pytest.warns(UserWarning, match="^Anomaly Detection has been enabled. This mode will increase the runtime "
                                         "and should only be enabled for debugging.$"):
        deco = dg.autograd.detect_anomaly(check_nan=False)

    @deco
    def f():
        return dg.is_anomaly_enabled(), dg.is_anomaly_check_nan_enabled()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f() == (True, False) and f() == (True, False)
    assert not dg.is_anomaly_enabled()


@pytest.mark.parametrize("name", ["no_grad", "enable_grad"])
def test_reusing_one_instance_matches_torch(name):
    """Reusing one instance, in sequence and nested, gives torch's states (nested reuse included:
    the inner entry overwrites what the outer one would restore, in torch as here).  torch's
    ``inference_mode`` is left out: reusing it nested drops the outer C++ guard, a refcount accident."""
    def trace(lib, read):
        ctx, seen = getattr(lib, name)(), []
        with ctx:
            seen.append(read())
        seen.append(read())
        with ctx:
            with ctx:
                seen.append(read())
            seen.append(read())
        seen.append(read())
        return seen

    try:
        expected = trace(torch, torch.is_grad_enabled)
    finally:
        torch.set_grad_enabled(True)
    try:
        assert trace(dg, dg.is_grad_enabled) == expected
    finally:
        dg.set_grad_enabled(True)


def test_results_follow_the_decorated_mode():
    x = dg.from_array(np.ones(4), chunks=2, requires_grad=True)

    @dg.no_grad()
    def adder(a, b):
        return a + b

    with dg.no_grad():
        w = x + x
    z = adder(x, x)
    assert not w.requires_grad and w.grad_fn is None and not z.requires_grad and z.grad_fn is None
    with dg.no_grad():
        assert not dg.is_grad_enabled()
        adder(x, x)
        assert not dg.is_grad_enabled()
