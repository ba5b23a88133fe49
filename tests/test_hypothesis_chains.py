"""Property: random chains of ops on randomly chunked inputs pass the gradient check and keep chunks.
The chains draw from every unary and binary elementwise op of the table (each mapped onto the
domain where it is smooth), plus a few shape and reduction steps."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskgrad as dg
from daskgrad.ops._util import OPS
from daskgrad.testing import gradcheck


# domains: each maps any real tensor onto where an op is smooth (and keeps values moderate along a chain)
def anywhere(t):
    return t


def bounded(t):  # (-2, 2): for ops that grow fast
    return dg.tanh(t) * 2


def positive(t):  # > 0.2: logs, roots, divisors, and kinks at 0 kept away
    return dg.softplus(t) + 0.2


def above_one(t):
    return dg.softplus(t) + 1.2


def unit(t):  # (-0.9, 0.9): arcsin, arccos, arctanh
    return dg.tanh(t) * 0.9


_UNARY = {  # name: (op, domain)
    "neg": (dg.neg, anywhere), "negative": (dg.negative, anywhere), "positive": (dg.positive, anywhere),
    "abs": (dg.abs, positive), "absolute": (dg.absolute, positive), "fabs": (dg.fabs, positive),
    "exp": (dg.exp, bounded), "exp2": (dg.exp2, bounded), "expm1": (dg.expm1, bounded),
    "log": (dg.log, positive), "log2": (dg.log2, positive), "log10": (dg.log10, positive),
    "log1p": (dg.log1p, positive), "sqrt": (dg.sqrt, positive), "cbrt": (dg.cbrt, positive),
    "reciprocal": (dg.reciprocal, positive), "square": (dg.square, bounded),
    "sin": (dg.sin, anywhere), "cos": (dg.cos, anywhere), "tan": (dg.tan, unit), "sinh": (dg.sinh, bounded),
    "cosh": (dg.cosh, bounded), "tanh": (dg.tanh, anywhere), "arcsin": (dg.arcsin, unit), "asin": (dg.asin, unit),
    "arccos": (dg.arccos, unit), "acos": (dg.acos, unit), "arctan": (dg.arctan, anywhere),
    "atan": (dg.atan, anywhere), "arcsinh": (dg.arcsinh, anywhere), "asinh": (dg.asinh, anywhere),
    "arccosh": (dg.arccosh, above_one), "acosh": (dg.acosh, above_one), "arctanh": (dg.arctanh, unit),
    "atanh": (dg.atanh, unit), "sinc": (dg.sinc, positive), "deg2rad": (dg.deg2rad, anywhere),
    "radians": (dg.radians, anywhere), "rad2deg": (lambda t: dg.rad2deg(t) * 0.01, anywhere),
    "degrees": (lambda t: dg.degrees(t) * 0.01, anywhere), "sigmoid": (dg.sigmoid, anywhere),
    "softplus": (dg.softplus, anywhere), "relu": (dg.relu, anywhere), "erf": (dg.erf, anywhere),
    "floor": (dg.floor, anywhere), "ceil": (dg.ceil, anywhere), "trunc": (dg.trunc, anywhere),
    "fix": (dg.fix, anywhere), "round": (dg.round, anywhere), "around": (dg.around, anywhere),
    "rint": (dg.rint, anywhere), "sign": (dg.sign, anywhere), "nan_to_num": (dg.nan_to_num, anywhere),
    "clip": (lambda t: dg.clip(t, -0.5, 0.7), anywhere), "clamp": (lambda t: dg.clamp(t, -0.5, 0.7), anywhere),
    "real": (dg.real, anywhere), "conj": (dg.conj, anywhere), "conjugate": (dg.conjugate, anywhere),
    "imag": (lambda t: dg.imag(t * (1 + 0.5j)), anywhere), "angle": (lambda t: dg.angle(t * (1 + 0.5j)), anywhere),
    "modf": (lambda t: dg.modf(t)[0], anywhere), "frexp": (lambda t: dg.frexp(t)[0], positive),
    "i0": (dg.i0, bounded),
}
_BINARY = {  # name: (op, domain of the first operand, of the second)
    "add": (dg.add, anywhere, anywhere), "sub": (dg.sub, anywhere, anywhere),
    "subtract": (dg.subtract, anywhere, anywhere), "mul": (dg.mul, anywhere, bounded),
    "multiply": (dg.multiply, anywhere, bounded), "truediv": (dg.truediv, anywhere, positive),
    "divide": (dg.divide, anywhere, positive), "true_divide": (dg.true_divide, anywhere, positive),
    "pow": (dg.pow, positive, bounded), "power": (dg.power, positive, bounded),
    "float_power": (dg.float_power, positive, bounded), "maximum": (dg.maximum, anywhere, anywhere),
    "minimum": (dg.minimum, anywhere, anywhere), "fmax": (dg.fmax, anywhere, anywhere),
    "fmin": (dg.fmin, anywhere, anywhere), "arctan2": (dg.arctan2, anywhere, positive),
    "atan2": (dg.atan2, anywhere, positive), "hypot": (dg.hypot, positive, positive),
    "logaddexp": (dg.logaddexp, anywhere, anywhere), "logaddexp2": (dg.logaddexp2, anywhere, anywhere),
    "fmod": (dg.fmod, positive, positive), "mod": (dg.mod, positive, positive),
    "remainder": (dg.remainder, positive, positive),
    "copysign": (lambda a, b: dg.copysign(a, b) + 0.1 * b, positive, anywhere),  # (b's sign has no gradient)
    "ldexp": (dg.ldexp, anywhere, bounded), "where": (lambda a, b: dg.where(a > b, a, b * 2), anywhere, anywhere),
    "clip_tensor_bounds": (lambda a, b: dg.clip(a, -b, b), anywhere, positive),
}
UNARY = {**{name: (lambda t, f=f, d=d: f(d(t))) for name, (f, d) in _UNARY.items()},
         "cumsum0": lambda t: dg.cumsum(t, axis=0), "cumprod1": lambda t: dg.cumprod(bounded(t), axis=1),
         "flip1": lambda t: dg.flip(t, 1), "softmax1": lambda t: dg.softmax(t, axis=1),
         "transpose2": lambda t: t.T.T, "slice": lambda t: dg.pad(t[1:, :], ((1, 0), (0, 0))),
         "roll": lambda t: dg.roll(t, 1, axis=0), "gradient0": lambda t: dg.gradient(t, axis=0)}
BINARY = {**{name: (lambda a, b, f=f, da=da, db=db: f(da(a), db(b))) for name, (f, da, db) in _BINARY.items()},
          "matmul_sq": lambda a, b: (a @ b.T) @ a * 0.1,
          "take_along_axis": lambda a, b: dg.take_along_axis(a, dg.argsort(b, axis=1), axis=1) + 0.1 * b}
REDUCE = {
    "sum": dg.sum, "mean_axis": lambda t: dg.mean(t, axis=0), "logsumexp": lambda t: dg.logsumexp(t, axis=1),
    "max_axis": lambda t: dg.max(t, axis=1), "var": lambda t: dg.var(t, axis=0),
    "nanvar": lambda t: dg.nanvar(t, axis=1), "prod": lambda t: dg.prod(bounded(t), axis=0),
}

# elementwise ops of the table that return no float (comparisons, casts, constants) or move devices
NOT_CHAINED = {"eq", "ne", "lt", "le", "gt", "ge", "equal", "not_equal", "greater", "greater_equal", "less",
               "less_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or",
               "bitwise_xor", "bitwise_not", "invert", "astype", "clone", "to_device", "full_like", "ones_like",
               "zeros_like",
               "nextafter"}  # (x's neighbouring float, torch's gradient that of x: gradchecked in op_specs)
COMPOSITE_ELEMENTWISE = {"cbrt", "sinc", "deg2rad", "radians", "rad2deg", "degrees", "positive", "copysign",
                         "float_power", "nan_to_num", "imag", "angle", "erf", "fmax", "fmin", "ldexp", "frexp", "modf"}


def test_the_chains_draw_from_every_elementwise_op_of_the_table():
    table = {n for n, (f, _) in OPS.items() if f.__module__ == "daskgrad.ops.elementwise"} | COMPOSITE_ELEMENTWISE
    drawn = set(_UNARY) | set(_BINARY)
    assert not table - NOT_CHAINED - drawn, f"elementwise ops no chain draws: {sorted(table - NOT_CHAINED - drawn)}"


def chunks_for(n):
    return st.one_of(st.just(n), st.just(1), st.integers(1, n),
                     st.lists(st.integers(1, 3), min_size=1, max_size=n).map(lambda c: _fit(c, n)))


def _fit(parts, n):
    out, total = [], 0
    for p in parts:
        if total + p >= n:
            break
        out.append(p)
        total += p
    out.append(n - total)
    return tuple(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from(sorted(UNARY)), st.sampled_from(sorted(BINARY))), min_size=1,
                    max_size=3),
       reduce=st.sampled_from(sorted(REDUCE)), rows=chunks_for(5), cols=chunks_for(4),
       seed=st.integers(0, 2**16))
def test_random_op_chains_pass_gradcheck_and_keep_chunks(ops, reduce, rows, cols, seed):
    rng = np.random.default_rng(seed)
    rows = (rows,) if isinstance(rows, int) else (rows,)
    cols = (cols,) if isinstance(cols, int) else (cols,)
    a = dg.from_array(rng.uniform(-1, 1, (5, 4)), chunks=rows + cols, requires_grad=True)
    b = dg.from_array(rng.uniform(-1, 1, (5, 4)), chunks=(2, 3), requires_grad=True)

    def f(x, y):
        for u, bi in ops:
            x = BINARY[bi](UNARY[u](x), y)
        return REDUCE[reduce](x)

    assert gradcheck(f, [a, b], eps=1e-6, atol=1e-5, rtol=1e-4)
    f(a, b).sum().backward()
    assert a.grad.chunks == a.chunks and b.grad.chunks == b.chunks
