"""Every mode a thread runs under: grad mode, inference mode, anomaly detection, and the trace of a
function ``daskgrad.compile`` is recording.

Each mode is a :class:`_Mode`: a context manager that is also a decorator (of plain and of
generator functions), as torch's are.  This module imports nothing from daskgrad, so every other
module may read the modes from it.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import sys
import threading
import warnings

class _Modes(threading.local):
    """This thread's modes: per client thread, as in torch (a thread, or a worker task, never sees
    another's).  A thread starts with the defaults, the class's attributes: every op reads them, as
    plain attributes (``getattr`` with a default cost a tenth of an op's recording)."""

    grad, inference, anomaly, check_nan, trace = True, False, False, True, None


_state = _Modes()
_NAMES = ("grad", "inference", "anomaly", "check_nan", "trace")


def _swap(values: dict) -> dict:
    """Set this thread's modes to ``values``; returns what they were, ready to be swapped back."""
    prev = {name: getattr(_state, name) for name in values}
    for name, value in values.items():
        setattr(_state, name, value)
    return prev


def carried(fn):
    """``fn`` to run in another thread under this thread's modes (modes are per thread)."""
    modes = {name: getattr(_state, name) for name in _NAMES}

    def run(*args, **kwargs):
        prev = _swap(modes)
        try:
            return fn(*args, **kwargs)
        finally:
            _swap(prev)

    return run


def is_grad_enabled() -> bool:
    """Whether grad mode is on in this thread: ops record for backward (torch's ``torch.is_grad_enabled``)."""
    return _state.grad


def is_inference_mode_enabled() -> bool:
    """Whether inference mode is on in this thread (torch's ``torch.is_inference_mode_enabled``)."""
    return _state.inference


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on in this thread (torch's ``torch.is_anomaly_enabled``)."""
    return _state.anomaly


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection also checks each backward rule's output for NaN
    (torch's ``torch.is_anomaly_check_nan_enabled``)."""
    return _state.check_nan


def current_trace():
    """The trace ``daskgrad.compile`` is recording in this thread (it is told what the function
    reads, makes and does that a replay could not repeat), or ``None``."""
    return _state.trace


def set_trace(trace):
    """Record into ``trace`` (``None``: stop); returns the trace recorded before."""
    return _swap({"trace": trace})["trace"]


def _wrap_generator(factory, gen_fn):
    """Run each step of the generator under a fresh context, as torch's
    ``_DecoratorContextManager`` does: the mode holds inside the body and the
    caller's mode is back whenever the generator is suspended at a ``yield``."""

    @functools.wraps(gen_fn)
    def generator_context(*args, **kwargs):
        gen = gen_fn(*args, **kwargs)
        try:
            with factory():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with factory():
                        gen.close()
                    raise
                except BaseException:
                    with factory():
                        response = gen.throw(*sys.exc_info())
                else:
                    with factory():
                        response = gen.send(request)
        except StopIteration as e:
            return e.value

    return generator_context


def _decorate(factory, fn):
    """``fn`` run under ``factory()``; a generator function gets the mode in its body, not
    just while the generator object is created (which runs none of the body)."""
    if inspect.isclass(fn):  # torch still calls the class under the mode, and warns
        warnings.warn("Decorating classes is deprecated and will be disabled in future versions. You should only "
                      "decorate functions or methods. To preserve the current behavior of class decoration, you "
                      "can directly decorate the `__init__` method and nothing else.", FutureWarning, stacklevel=3)
        cls = fn
        fn = lambda *args, **kwargs: cls(*args, **kwargs)  # noqa: E731
    if inspect.isgeneratorfunction(fn):
        return _wrap_generator(factory, fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with factory():
            return fn(*args, **kwargs)

    return wrapper


class _Mode(contextlib.ContextDecorator):
    """Sets ``self._target`` (mode name -> value) on entry and restores the previous values on exit.

    A subclass's ``__init__`` fills ``_target``.  ``_bare``: the class also decorates without the
    call (``@no_grad``).  ``_eager``: the mode is applied at construction, so a plain call sets it
    for the thread (``set_grad_enabled(False)``), and exit restores what was there before that call.
    """

    _bare = False
    _eager = False
    _target: dict

    def __new__(cls, *args, **kwargs):
        given = (*args, *kwargs.values())
        if cls._bare and len(given) == 1 and callable(given[0]):  # also ``inference_mode(mode=fn)``, as torch
            return cls()(given[0])
        self = super().__new__(cls)
        self._args = (args, kwargs)  # for _recreate_cm: each decorated call gets its own instance
        return self

    def _apply_now(self) -> None:
        self._prev = _swap(self._target)

    def __enter__(self):
        prev = _swap(self._target)
        if not self._eager:
            self._prev = prev
        return self

    def __exit__(self, *exc):
        _swap(self._prev)
        return False

    def __call__(self, fn):
        if self._eager:  # used as a decorator: constructing it must not have switched the mode
            _swap(self._prev)
        return _decorate(self._recreate_cm, fn)

    def _recreate_cm(self):  # a fresh instance per decorated call keeps recursion and threads safe
        args, kwargs = self._args
        return type(self)(*args, **kwargs)


class no_grad(_Mode):
    """Ops inside do not record: results are constant leaves (``requires_grad=False``)."""

    _bare = True

    def __init__(self, orig_func=None):
        self._target = {"grad": False}


class enable_grad(_Mode):
    """Turn recording back on, e.g. inside ``no_grad``."""

    _bare = True

    def __init__(self, orig_func=None):
        self._target = {"grad": True}


class set_grad_enabled(_Mode):
    """``set_grad_enabled(False)`` as a plain call sets the mode for this thread;
    as a context manager or decorator it restores the previous mode on exit."""

    _eager = True

    def __init__(self, mode: bool):
        self.mode = mode
        self._target = {"grad": bool(mode)}
        self._apply_now()


class inference_mode(_Mode):
    """``no_grad`` whose results are *inference tensors*: they can never be saved for backward,
    take ``requires_grad_()`` or be written in place outside the mode.  ``inference_mode(False)``
    records normally.  A context manager or decorator, with or without the call."""

    _bare = True

    def __init__(self, mode=True):
        self.mode = bool(mode)
        self._target = {"grad": not self.mode, "inference": self.mode}


_ANOMALY_WARNING = ("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                    "enabled for debugging.")


class detect_anomaly(_Mode):
    """Anomaly detection for this thread: forward stacks are kept, so a NaN made in backward
    (unless ``check_nan=False``) or a failed saved-value check names the forward line behind it."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan
        self._target = {"anomaly": True, "check_nan": bool(check_nan)}
        warnings.warn(_ANOMALY_WARNING, UserWarning, stacklevel=2)

    def _recreate_cm(self):
        with warnings.catch_warnings():  # the warning was given once, at decoration
            warnings.simplefilter("ignore")
            return super()._recreate_cm()


class set_detect_anomaly(_Mode):
    """Sets anomaly mode as a plain call; as a context manager it restores the previous mode."""

    _eager = True

    def __init__(self, mode: bool, check_nan: bool = True):
        self._target = {"anomaly": bool(mode), "check_nan": bool(check_nan)}
        self._apply_now()

    def __enter__(self):  # torch's enters without setting again: the call already did
        return self


# ------------------------------------------------------------------ deterministic mode (process-wide, as torch's)
_deterministic = {"enabled": False, "warn_only": False}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch's switch: with ``True``, a run's numbers do not depend on where its tasks run or on
    thread counts -- the same bits on the local scheduler and on any cluster of this software and
    hardware (:mod:`daskgrad._dask.deterministic` says how, and what it costs).  ``warn_only`` is
    kept for torch's signature (daskgrad has no op without a deterministic form to warn about)."""
    for name, value in (("mode", mode), ("warn_only", warn_only)):
        if not isinstance(value, bool):
            where = "(position 1) " if name == "mode" else ""
            raise TypeError(f"_set_deterministic_algorithms(): argument '{name}' {where}must be bool, not "
                            f"{type(value).__name__}")
    if mode and importlib.util.find_spec("threadpoolctl") is None:
        raise ImportError("daskgrad.use_deterministic_algorithms(True) runs BLAS on one thread in each process "
                          "that runs tasks, which needs threadpoolctl: pip install 'daskgrad[deterministic]'")
    _deterministic.update(enabled=mode, warn_only=warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` turned the mode on."""
    return _deterministic["enabled"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether the mode was turned on with ``warn_only=True``."""
    return _deterministic["enabled"] and _deterministic["warn_only"]
