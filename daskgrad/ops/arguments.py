"""torch's TypeErrors for a Tensor method called with arguments it does not take.

torch's methods that take no argument at all are C methods: ``x.abs(1)`` raises ``Tensor.abs() takes no arguments
(1 given)`` and ``x.abs(foo=1)`` ``Tensor.abs() takes no keyword arguments``, where daskgrad's ops, which take
NumPy's optional arguments (``abs(x, out=None)``) or none (``angle(x, deg=False)`` took a number silently), raised
Python's words for another signature or computed.  Those methods, and torch's methods that take keywords only
(``x.float(memory_format=...)``: ``float() takes 0 positional arguments but 1 was given``), check here first, with
torch's words; so do the reductions' ``keepdim``, which torch takes as a Python bool only.  The tables are
generated from torch 2.13 (every method of ``torch.Tensor`` that daskgrad's Tensor also has, called with one
argument, whose error has either form), as :mod:`.refusals`' are; installed last, over the methods the other
modules put on :class:`~daskgrad.Tensor`.
"""
from __future__ import annotations

import functools

from .._tensor import Tensor

NO_ARGUMENTS = frozenset("""
    __abs__ __invert__ __neg__ __pos__ _is_view abs abs_ absolute absolute_ acos acos_ acosh acosh_ adjoint
    angle arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan_ arctanh arctanh_
    argwhere asin asin_ asinh asinh_ atan atan_ atanh atanh_ bitwise_not bitwise_not_ ceil ceil_ conj
    conj_physical conj_physical_ corrcoef cos cos_ cosh cosh_ deg2rad deg2rad_ det detach detach_ digamma
    digamma_ dim element_size erf erf_ erfc erfc_ erfinv erfinv_ exp exp2 exp2_ exp_ expm1 expm1_ fix fix_
    fliplr flipud floor floor_ frac frac_ frexp i0 i0_ inverse is_complex is_conj is_floating_point is_inference
    is_neg is_nonzero is_signed isfinite isinf isnan isneginf isposinf isreal lgamma lgamma_ log log10 log10_
    log1p log1p_ log2 log2_ log_ logdet logical_not logical_not_ matrix_exp msort ndimension neg neg_ negative
    negative_ nelement numel positive rad2deg rad2deg_ ravel reciprocal reciprocal_ relu relu_ resolve_conj
    resolve_neg rsqrt rsqrt_ sgn sgn_ sigmoid sigmoid_ sign sign_ signbit sin sin_ sinc sinc_ sinh sinh_ slogdet
    sqrt sqrt_ square square_ storage_offset t t_ tan tan_ tanh tanh_ trace trunc trunc_ zero_
""".split())
# the names torch's error gives the dunder methods (the C function behind them)
_LABELS = {"__abs__": "abs", "__neg__": "neg", "__pos__": "positive"}
KEYWORDS_ONLY = frozenset("aminmax bool byte cdouble cfloat char clone contiguous cov double float half int "
                          "is_contiguous long short".split())


# the methods whose ``keepdim`` (their second argument) torch's parser takes as a Python bool only (an int, a NumPy
# bool refused: ``x.argmax(0, 1.5)`` computed here); generated from torch 2.13 as the tables above
KEEPDIM = frozenset("amax amin argmax argmin logsumexp max mean median min mode nanmean nanmedian nansum prod "
                    "sum".split())


def _type_name(v):
    kind = type(v)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def _bool_keepdim(method, name):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if len(args) > 1 and type(args[1]) is not bool:
            raise TypeError(f"{name}(): argument 'keepdim' (position 2) must be bool, not {_type_name(args[1])}")
        if "keepdim" in kwargs and type(kwargs["keepdim"]) is not bool:
            raise TypeError(f"{name}(): argument 'keepdim' must be bool, not {_type_name(kwargs['keepdim'])}")
        return method(self, *args, **kwargs)
    call.__required__ = getattr(method, "__required__", method)  # (tools/make_stubs.py shows the method's own)
    return call


def _no_arguments(method, name):
    label = f"Tensor.{_LABELS.get(name, name)}()"

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if kwargs:  # (Python's order for a C method taking none: the keywords first)
            raise TypeError(f"{label} takes no keyword arguments")
        if args:
            raise TypeError(f"{label} takes no arguments ({len(args)} given)")
        return method(self)
    call.__required__ = getattr(method, "__required__", method)
    return call


def _keywords_only(method, name):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if args:
            raise TypeError(f"{name}() takes 0 positional arguments but {len(args)} "
                            f"{'was' if len(args) == 1 else 'were'} given")
        return method(self, **kwargs)
    call.__required__ = getattr(method, "__required__", method)
    return call


def install():
    for name in NO_ARGUMENTS:
        if name in vars(Tensor):
            setattr(Tensor, name, _no_arguments(vars(Tensor)[name], name))
    for name in KEYWORDS_ONLY:
        if name in vars(Tensor):
            setattr(Tensor, name, _keywords_only(vars(Tensor)[name], name))
    for name in KEEPDIM:
        if name in vars(Tensor):
            setattr(Tensor, name, _bool_keepdim(vars(Tensor)[name], name))
