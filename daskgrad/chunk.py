"""Step 5 of the data flow: what runs on a worker, one chunk at a time.

Kernels take whatever array type the chunk is (NumPy, cupy, a test double) and
use only operators and NumPy functions that dispatch on it (NEP 13/18/35), so
nothing here moves a chunk to the host.
"""
from __future__ import annotations

import numpy as np


class LinAlgError(RuntimeError):
    """torch's ``torch.linalg.LinAlgError``: a factorisation or solve that failed on the values (a singular
    matrix), raised by the chunk kernel that met it (``daskgrad.linalg.LinAlgError``)."""


def _elementwise(kernel):
    """Marks a kernel of broadcasting operands and numbers that an elementwise primitive applies block by
    block (a fused chain runs it with the others, as it runs an operator or a ufunc)."""
    kernel.elementwise_kernel = True
    return _rows("elementwise")(kernel)


def _rows(rule):
    """Says how a kernel treats rows, so a fused step can run it on blocks of rows
    (:mod:`daskgrad._dask.rows`): "elementwise" (each element on its own, operands broadcast as
    NumPy does), "matmul" or "matmul_partial" (a product of at most 2-d operands), "reduce"
    (:func:`reduce`)."""
    def mark(kernel):
        kernel.row_rule = rule
        return kernel
    return mark


@_rows("matmul")
def matmul(a, b):
    """``a @ b`` for a contraction within one chunk.  Blockwise hands over the contracted axis as
    one-element lists; unwrapping them avoids the copy that ``concatenate=True`` would make."""
    if isinstance(a, list):
        (a,) = a
    if isinstance(b, list):
        (b,) = b
    return a @ b


@_rows("matmul_partial")
def matmul_partial(a, b):
    """One chunk pair's share of a product whose contracted axis spans several chunks."""
    return (a @ b)[None]


@_rows("elementwise")
def sigmoid(x):
    """torch's formula, ``1 / (1 + exp(-x))``: where ``exp`` overflows (x below about -88 in
    float32) the result is 0, as in torch, so the overflow is expected and not warned about.
    Four passes over the chunk; a branch-free stable form with ``where`` took seven times longer.  (Of complex
    values past the range, NaN, as torch's, unwarned.)"""
    with np.errstate(over="ignore", invalid="ignore"):
        return 1 / (1 + np.exp(-x))


@_rows("elementwise")
def sign(x):
    """torch's ``sign`` of floats: 0 at NaN (NumPy's is NaN), -1, 0 or 1 elsewhere."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


@_rows("elementwise")
def softplus(x):
    """``log(1 + exp(x)) = max(x, 0) + log1p(e)`` with ``e = exp(-|x|)`` in (0, 1], never overflowing.

    ``log1p`` is not vectorized in NumPy (float32: ~10 ns an element, most of a logistic-regression
    chunk's loss); ``log(u) - ((u - 1) - e) / u`` with ``u = 1 + e`` is, and corrects the rounding
    of ``u`` to within 3 ulp (where ``u`` rounds to 1 it gives ``e`` itself).  A chunk of fewer than
    :data:`_FEW` elements takes ``log1p`` itself: there NumPy's cost is per call, not per element (a
    logistic regression's tiny chunks spent half their kernel time here), and it is within 1 ulp."""
    e = np.exp(-np.abs(x))
    if x.size < _FEW:
        return np.maximum(x, 0) + np.log1p(e)
    u = 1 + e
    return np.maximum(x, 0) + (np.log(u) - ((u - 1) - e) / u)


_FEW = 64  # elements: fewer in a chunk, and a kernel's NumPy calls cost more than its elements (row blocks have more)


@_rows("elementwise")
def bce_with_logits(z, y):
    """The terms of binary cross-entropy from logits, ``softplus(z) - z y``."""
    return softplus(z) - z * y


@_rows("elementwise")
def bce_with_logits_grad(z, y, g):
    """Its gradient with respect to the logits, ``(sigmoid(z) - y) g``."""
    return (sigmoid(z) - y) * g


def sum_blocks(blocks):
    """Add the partial products of a contraction over several chunks (each has a leading axis of 1)."""
    total = blocks[0][0]
    for b in blocks[1:]:
        total = total + b[0]
    return total


def filled(meta, shape, dtype, value):
    """``value`` in ``shape``, of ``meta``'s array type (its device).  A 0-d block is made from one
    element: cupy's ``full_like``/``ones_like`` read ``shape=()`` as no shape given (the meta's, ``(0,)``)."""
    return np.full_like(meta, value, shape=tuple(shape) or (1,), dtype=dtype).reshape(shape)


def ones(meta, shape, dtype):
    """Ones of ``shape`` of ``meta``'s array type (its device)."""
    return filled(meta, shape, dtype, 1)


def like(host, block):
    """An explicit host-to-device copy of a small host array (indices) next to ``block``."""
    return np.array(host, like=block)


def take(block, idx, axis):
    return np.take(block, like(idx, block), axis=axis)


@_rows("elementwise")
def full_like(block, value, dtype=None):
    return np.full_like(block, value, dtype=dtype)


@_rows("reduce")
def reduce(block, fn, axis, keepdims):
    """``np.<fn>(block, axis, keepdims)`` for a reduction that stays inside one chunk.  Blockwise
    hands over nested one-element lists for the dropped axes (``concatenate=False``)."""
    while isinstance(block, list):
        (block,) = block
    return getattr(np, fn)(block, axis=axis, keepdims=keepdims)


def spread(block, axes, block_info=None):
    """Broadcast a reduced block back over the reduced ``axes`` to this output chunk's shape."""
    block, shape = np.expand_dims(block, axes), block_info[None]["chunk-shape"]
    if any(n != n for n in shape):  # (a length not known until computed, after a boolean mask: the block's own)
        shape = tuple(m if n != n else n for n, m in zip(shape, block.shape))
    return np.broadcast_to(block, shape)


def mask_select(block, mask):
    """``block[mask]`` for one row block (the forward of boolean-mask indexing)."""
    return block[mask]


def mask_scatter(mask, values):
    """Zeros shaped ``mask.shape + values.shape[1:]`` with ``values`` written where ``mask`` is True (its VJP),
    made like ``values`` (a host mask over device chunks: the zeros on the device)."""
    out = np.zeros_like(values, shape=mask.shape + values.shape[1:])
    out[mask] = values
    return out


def one_hot(block, index, block_info=None):
    """Zeros like ``block`` with a 1 at the global ``index`` when it falls in this chunk (the
    Jacobian's basis cotangents, made on the chunk's device)."""
    out = np.zeros_like(block)
    loc = block_info[0]["array-location"]
    if all(lo <= i < hi for i, (lo, hi) in zip(index, loc)):
        out[tuple(i - lo for i, (lo, _) in zip(index, loc))] = 1
    return out


def permute_along(block, key, axis, inverse):
    """``block`` reordered along ``axis`` as sorting ``key`` would order it (``inverse``: put back)."""
    order = np.argsort(key, axis=axis, kind="stable")  # (dispatched to cupy for cupy chunks)
    if inverse:
        order = np.argsort(order, axis=axis, kind="stable")
    return np.take_along_axis(block, order, axis)


def argsort(block, axis, descending=False):
    """Stable; NaN last, or first when ``descending`` (the largest, as torch's sort orders it): the
    ascending order of the reversed block, reversed, keeps equal values in their order."""
    if not descending:
        return np.argsort(block, axis=axis, kind="stable")
    order = np.flip(np.argsort(np.flip(block, axis), axis=axis, kind="stable"), axis)
    return block.shape[axis] - 1 - order


def argpartition(block, kth, axis):
    return np.argpartition(block, kth, axis=axis)


# I1(x) = (x/2) sum_k y^k / (k! (k+1)!), y = x^2/4: positive terms, no cancellation; 64 terms reach
# double precision up to |x| = 25.  Beyond it, Hankel's expansion e^x / sqrt(2 pi x) sum_k a_k / x^k,
# a_k = -a_{k-1} (4 - (2k-1)^2) / (8k), 30 terms under 1e-18 there.
_I1_SERIES = [1.0]
for _k in range(1, 64):
    _I1_SERIES.append(_I1_SERIES[-1] / (_k * (_k + 1)))
_I1_HANKEL = [1.0]
for _k in range(1, 30):
    _I1_HANKEL.append(_I1_HANKEL[-1] * -(4 - (2 * _k - 1) ** 2) / (8 * _k))
_I1_SPLIT = 25.0


@_rows("elementwise")
def i1(x):
    """The modified Bessel function of the first kind, order 1 (torch's ``special.i1``), from NumPy
    operations on the chunk (cupy's own kernel on cupy chunks)."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupyx.scipy.special
        return cupyx.scipy.special.i1(x)
    ax = np.absolute(x)
    small = np.minimum(ax, _I1_SPLIT)
    y = small * small / 4
    acc = np.zeros_like(x) + _I1_SERIES[-1]
    for c in reversed(_I1_SERIES[:-1]):
        acc = acc * y + c
    near = acc * small / 2
    big = np.maximum(ax, _I1_SPLIT)
    r = 1 / big
    tail = np.zeros_like(x) + _I1_HANKEL[-1]
    for c in reversed(_I1_HANKEL[:-1]):
        tail = tail * r + c
    with np.errstate(over="ignore"):  # I1 overflows past about 713, to inf as NumPy's i0 does
        far = np.exp(big) / np.sqrt(2 * np.pi * big) * tail
    return np.sign(x) * np.where(ax <= _I1_SPLIT, near, far)


# ----------------------------------------------- selecting without branches
_SELECT_BLOCK = 1 << 15  # elements a block: its operands, mask and result stay in a core's cache
_SELECT_INTS = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


@_elementwise
def where(c, a, b):
    """``np.where(c, a, b)``, bit for bit.  On large NumPy chunks it selects without branches: NumPy's
    ``where`` branches per element, and with a condition that changes at random (a ReLU's, half its
    inputs negative) every other branch is mispredicted, 5-8 ns an element, ten times its ``maximum``.
    Here the result is ``b ^ ((a ^ b) & m)`` on the bits, ``m`` all ones where ``c``: three integer
    passes, block by block in cache.  Another chunk type (cupy), a small or broadcast one, or dtypes
    that differ go to NumPy's ``where``."""
    out = _select(c, a, b)
    return np.where(c, a, b) if out is None else out


def _select(c, a, b):
    """:func:`where` without branches, or None where it does not apply (see there)."""
    if type(c) is not np.ndarray or c.dtype != bool or c.size < 2 * _SELECT_BLOCK or not c.flags.c_contiguous:
        return None
    try:
        dtype = np.result_type(a, b)
    except (TypeError, ValueError, OverflowError):
        return None
    ints = _SELECT_INTS.get(dtype.itemsize)
    if ints is None or dtype.kind not in "biuf":
        return None
    bits = []
    for v in (a, b):
        if type(v) is np.ndarray and v.ndim:
            if v.shape != c.shape or v.dtype != dtype or not v.flags.c_contiguous:
                return None
            bits.append(v.reshape(-1).view(ints))
        elif type(v) in (bool, int, float) or isinstance(v, (np.generic, np.ndarray)) and np.ndim(v) == 0:
            try:
                v = np.asarray(v, dtype=dtype)  # (NumPy's where casts it so)
            except (OverflowError, ValueError):  # (an int out of the dtype's range: NumPy's where decides)
                return None
            bits.append(v.view(ints))
        else:
            return None
    (a, b), mask = bits, c.reshape(-1).view(np.int8)
    out = np.empty(c.size, dtype=ints)
    for i in range(0, c.size, _SELECT_BLOCK):
        part = slice(i, i + _SELECT_BLOCK)
        o = out[part]
        m = np.negative(mask[part] != 0, dtype=ints)  # (True: -1, all bits set; a bool byte may hold 2: view(bool))
        np.bitwise_xor(a[part] if a.ndim else a, b[part] if b.ndim else b, out=o)
        np.bitwise_and(o, m, out=o)
        np.bitwise_xor(o, b[part] if b.ndim else b, out=o)
    return out.view(dtype).reshape(c.shape)


# ----------------------------------------------- torch's special values, on any chunk type
@_rows("elementwise")
def clamp_min(x, lo):
    """torch's ``clamp(min=lo)``: ``lo`` where ``x < lo`` or ``lo`` is NaN, else ``x`` itself, so a tie
    keeps ``x``'s sign of zero (``clamp(-0.0, min=0.0)`` and ``relu(-0.0)`` are -0.0; NumPy's ``maximum``
    gives 0.0) and a NaN ``x`` stays NaN."""
    return where(x < lo if _not_nan(lo) else (x < lo) | (lo != lo), lo, x)


@_rows("elementwise")
def clamp_max(x, hi):
    """torch's ``clamp(max=hi)``, as :func:`clamp_min`."""
    return where(x > hi if _not_nan(hi) else (x > hi) | (hi != hi), hi, x)


def _not_nan(v):
    """Whether ``v`` is a number that is not NaN (a bound that is an array is checked element by element)."""
    return type(v) in (int, float, bool) and v == v


@_rows("elementwise")
def relu(x):
    """torch's ``relu``: ``clamp(x, min=0)``, -0.0 and NaN kept."""
    return clamp_min(x, 0)


@_rows("elementwise")
def remainder(a, b):
    """torch's floating ``remainder``: ``fmod(a, b)``, plus ``b`` where that is not zero and its sign is not
    ``b``'s; a zero keeps ``a``'s sign (NumPy's ``mod`` gives ``b``'s)."""
    with np.errstate(invalid="ignore", divide="ignore"):  # (x % 0 is NaN, as torch's, unwarned)
        r = np.fmod(a, b)
    return np.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


def nonzero_divisor(b):
    """An integer divisor, checked: torch raises ``RuntimeError: ZeroDivisionError`` for an integer
    division or remainder by zero, where NumPy gives 0."""
    if (b == 0).any():
        raise RuntimeError("ZeroDivisionError")
    return b


def _int_dtype(a, b):
    """The dtype of promoted integer operands (one may be a Python int)."""
    return a.dtype if hasattr(a, "dtype") else b.dtype


def fma(x, y, z, dtype):
    """``x * y + z`` rounded once to ``dtype``, as torch's kernels' fused multiply-adds: float64 by
    Dekker's exact product and Knuth's exact sum (NumPy has no fma), whose parts added last round
    once in all but freak cases; float32 and half in float64, rounded back through float32 (torch's
    half computes in float32); other dtypes as they are."""
    if dtype in (np.float16, np.float32):
        x, y, z = (v.astype(np.float64) if hasattr(v, "astype") else v for v in (x, y, z))
        return (x * y + z).astype(np.float32).astype(dtype)
    if dtype != np.float64:
        return x * y + z
    p = x * y
    xh, yh = _split_high(x), _split_high(y)
    xl, yl = x - xh, y - yh
    e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl  # (p + e == x * y exactly)
    s = z + p
    bb = s - z
    t = (z - (s - bb)) + (p - bb)  # (s + t == z + p exactly)
    r = s + (t + e)
    return np.where(np.isnan(r), p + z, r)  # (an infinite part: the parts' differences are NaN, p + z is right)


def _split_high(x):
    c = 134217729.0 * x  # (2**27 + 1: Veltkamp's split of a float64 into two 26-bit halves)
    return c - (c - x)


@_elementwise
def lerp(a, b, w):
    """torch's ``lerp``: its two formulas, exact at both ends (weight 1 gives ``b``), ``a + w (b - a)`` for
    ``|w| < 0.5``, else ``b - (b - a)(1 - w)``, each one fused multiply-add (:func:`fma`)."""
    dtype = a.dtype
    if dtype == np.float16:  # (torch's half lerp: float32 throughout)
        a, b = a.astype(np.float32), b.astype(np.float32)
        w = w.astype(np.float32) if hasattr(w, "astype") else w
    if dtype in (np.float16, np.float32) and not hasattr(w, "astype"):
        w = float(np.float32(w))  # (torch's float weight)
    with np.errstate(all="ignore"):  # (torch computes infinities and NaN unwarned)
        d = b - a  # (rounded in the computing type, as torch's)
        if not hasattr(w, "astype"):
            return fma(w, d, a, dtype) if abs(w) < 0.5 else fma(-d, 1 - w, b, dtype)
        return np.where(np.abs(w) < 0.5, fma(w, d, a, dtype), fma(-d, 1 - w, b, dtype))


@_elementwise
def scaled_add(a, b, alpha):
    """torch's floating ``add(a, b, alpha=)``: one fused multiply-add, ``alpha`` in the computing type
    (of half, rounded to half first, as torch's)."""
    dtype = (a if hasattr(a, "dtype") else b).dtype
    if dtype.kind == "c":  # torch's complex kernel: a + (alpha + 0j) * b, whose NaNs (0 * inf) a sum of parts has not
        with np.errstate(all="ignore"):
            return a + dtype.type(alpha) * b
    alpha = np.float64(alpha) if dtype == np.float64 else np.float32(dtype.type(alpha))
    with np.errstate(all="ignore"):
        return fma(alpha, b, a, dtype)


@_elementwise
def addcmul(a, t1, t2, value):
    """torch's ``addcmul``: ``value * t1`` rounded, then one fused multiply-add with ``t2`` and ``a``."""
    if a.dtype.kind in "iu":
        value = np.trunc(value).astype(a.dtype)  # (torch's integer kernel reads value in the dtype: 2.5 is 2)
    if a.dtype.kind != "f":  # (value in the dtype: a 0-d int64 constant would make complex64 complex128)
        return a + a.dtype.type(value) * t1 * t2
    opmath = np.float64 if a.dtype == np.float64 else np.float32
    with np.errstate(all="ignore"):
        return fma(t1.astype(opmath) * opmath(value), t2.astype(opmath), a, a.dtype)


@_elementwise
def addcdiv(a, t1, t2, value):
    """torch's ``addcdiv``: ``a + value * t1 / t2``, half in float32 rounded once."""
    if a.dtype != np.float16:
        value = a.dtype.type(value) if a.dtype.kind in "fc" else value  # (a float64 number: not a float64 result)
        return a + value * t1 / t2
    f32 = np.float32
    return (a.astype(f32) + f32(value) * t1.astype(f32) / t2.astype(f32)).astype(a.dtype)


@_rows("elementwise")
def shift(a, s, left):
    """torch's ``a << s`` (``left``) or ``a >> s`` of integers: a count below 0 or of the width or more
    gives 0 (left) or the sign, -1 or 0 (right), where NumPy's is undefined (the count mod the width)."""
    dtype = _int_dtype(a, s)
    outside = (s < 0) | (s >= np.dtype(dtype).itemsize * 8)
    count = np.where(outside, 0, s).astype(dtype, copy=False)
    if left:
        return np.where(outside, 0, np.left_shift(a, count)).astype(dtype, copy=False)
    return np.where(outside, np.where(a < 0, -1, 0), np.right_shift(a, count)).astype(dtype, copy=False)


@_rows("elementwise")
def int_power(a, b):
    """torch's integer ``a ** b`` with tensor exponents: for a negative ``b``, 1 where ``a`` is 1, 1 or -1
    (``b`` even or odd) where ``a`` is -1, else 0 (NumPy refuses negative integer powers)."""
    dtype = _int_dtype(a, b)
    neg = b < 0
    r = np.power(a, np.where(neg, 0, b).astype(dtype, copy=False))
    sign = np.where(a == -1, 1 - 2 * (b & 1), a == 1)
    return np.where(neg, sign, r).astype(dtype, copy=False)


# torch's pow of a float32/64 tensor by these numbers: products and roots, not C's pow (x ** -0.5 is rsqrt:
# -inf at -0.0, NaN at -inf, where pow gives inf and 0; x ** 3 is x * x * x, to its last bit)
_POW_BY = {2: lambda a: a * a, 3: lambda a: a * a * a, -2: lambda a: 1 / (a * a), 0.5: np.sqrt,
           -0.5: lambda a: 1 / np.sqrt(a), -1: lambda a: 1 / a}


@_elementwise
def pow(a, b):  # noqa: A001  (torch's name: the op the dashboard shows)
    """torch's ``a ** b``: by the numbers of :data:`_POW_BY` a product or a root, as torch's kernel; of
    integers with a tensor exponent, torch's value for negative exponents (NumPy raises)."""
    dtype = (a if hasattr(a, "dtype") else b).dtype
    if not hasattr(b, "dtype"):
        special = _POW_BY.get(b) if dtype.kind == "f" and dtype.itemsize >= 4 and type(b) is not bool else None
        return a ** b if special is None else special(a)
    return int_power(a, b) if dtype.kind in "iu" else a ** b



# ----------------------------------------------- random draws, one chunk at a time
# torch's draws (``rand``, ``x.normal_()``, dropout's mask ...): each chunk draws from its own generator, seeded by
# the draw's run seed and the block id, so the values do not depend on the scheduler or the order chunks run in.
_UNIFORM_BITS = {"float16": 11, "float32": 24}  # torch's uniform of a narrow float: a multiple of 2**-bits below 1


def block_rng(block, seed, block_id):
    """The generator of one chunk of a draw: cupy's for a cupy chunk (drawn on the device), else NumPy's."""
    if type(block).__module__.split(".")[0] == "cupy":
        import cupy
        return cupy.random.default_rng(int(np.random.SeedSequence([seed, *block_id]).generate_state(1)[0]))
    return np.random.default_rng([seed, *block_id])


def random_block(block, *rest, kind, params, block_id=None):
    """One chunk of a draw of ``kind`` (``params`` its parameters; ``rest``: bernoulli's chunk of probabilities
    if any, then the run seed, a 0-d chunk), shaped and typed as ``block`` and of its array type: cupy's
    generator draws a cupy chunk on the device; any other chunk type (a test double) gets NumPy's draws copied
    next to it.  ``bernoulli`` with a second parameter is dropout's mask: that scale where drawn, else 0.  A
    complex chunk is drawn as torch draws one, as its real view: each part uniform, or normal with the
    standard deviation over sqrt(2)."""
    *probs, seed = rest
    rng, shape, dtype = block_rng(block, int(seed), block_id), np.shape(block), block.dtype
    put = (lambda v: v) if type(block).__module__.split(".")[0] in ("numpy", "cupy") else (lambda v: like(v, block))
    if dtype.kind == "c":
        real = np.finfo(dtype).dtype
        params = (params[0], params[1] / np.sqrt(2)) if kind == "normal" else params
        pairs = _drawn(rng, shape + (2,), real, put, kind, params, probs)
        return (pairs[..., 0] + 1j * pairs[..., 1]).astype(dtype)
    return _drawn(rng, shape, dtype, put, kind, params, probs).astype(dtype)


def _drawn(rng, shape, dtype, put, kind, params, probs):
    """:func:`random_block`'s values in float64 (int64 for the integer draws), before the cast to ``dtype``."""
    if kind in ("random", "geometric_int"):
        low, high = params
        return put(rng.integers(low, high, size=shape, dtype=np.int64, endpoint=True))
    if kind in ("normal", "log_normal"):
        mean, std = params
        out = put(rng.standard_normal(shape)) * std + mean
        return np.exp(out) if kind == "log_normal" else out
    bits = _UNIFORM_BITS.get(np.dtype(dtype).name) if kind == "uniform" else None
    # (a narrow float's uniform from its own bits: NumPy's 53-bit draw can round up to 1 in float32)
    u = put(rng.random(shape) if bits is None else rng.integers(0, 1 << bits, size=shape, dtype=np.int64) * 2.0**-bits)
    if kind == "uniform":
        low, high = params
        return u * (high - low) + low
    if kind == "exponential":
        return -np.log1p(-u) / params[0]
    if kind == "cauchy":
        median, sigma = params
        return median + sigma * np.tan(np.pi * (u - 0.5))
    if kind == "geometric":  # (the number of trials to the first success: 1, 2, ...)
        return np.maximum(np.ceil(np.log1p(-u) / np.log1p(-params[0])), 1)
    # bernoulli: with probability ``params[0]``, or each place's own; dropout's mask scales it
    p = probs[0] if probs else params[0]
    if probs and ((p < 0) | (p > 1) | (p != p)).any():
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                           "message be improved?  If so, please report an enhancement request to PyTorch.)")
    return u < p if len(params) < 2 else (u < p) * params[1]
