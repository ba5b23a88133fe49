"""torch.nn's multi_margin_loss, multilabel_margin_loss, triplet_margin_with_distance_loss, bilinear, pdist, the
in-place activation forms (relu_, elu_, celu_, selu_, leaky_relu_, hardtanh_, threshold_), rrelu and gumbel_softmax,
and their modules, against torch (installed): float64 values and gradients equal to torch's, in one chunk, even chunks
and uneven chunks, on inputs with the points where torch's kernels choose a side (a hinge exactly at 0, a repeated
target, tied coordinates, equal rows); module reprs and errors are torch's.  The random ones (rrelu while training,
gumbel_softmax) are checked by their statistics and by the gradient their draws imply."""
import math
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
T = torch.nn.functional
# (NumPy's warning where a zero distance's gradient for p < 1 divides by 0 before torch's mask takes it to 0)
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

RNG = np.random.default_rng(7)
CHUNKS = {"one": -1, "even": 3, "uneven": (2, 4)}  # along the 6 rows


def _pair(a, chunking="even", grad=True):
    a = np.asarray(a)
    chunks = (CHUNKS[chunking],) + (-1,) * (a.ndim - 1) if a.ndim and a.shape[0] == 6 else -1
    d = dg.from_array(a, chunks=chunks, requires_grad=grad and a.dtype.kind == "f")
    return d, torch.tensor(a, requires_grad=grad and a.dtype.kind == "f")


def _compare(yd, yt, pairs, atol=1e-15):
    """Values, then the gradients of every input that takes one for one random cotangent, equal to torch's."""
    assert yd.shape == tuple(yt.shape)
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    yt.backward(torch.tensor(g))
    pairs = [(d, t) for d, t in pairs if t.requires_grad]
    got = dg.compute(yd.detach(), *[d.grad for d, _ in pairs])
    single = yt.dtype != torch.float64  # (a module's default float32 parameters: sums in another order differ by
    for ours, theirs in zip(got, [yt] + [t.grad for _, t in pairs]):  # an ulp of their largest term)
        theirs = theirs.detach().numpy()
        scale = 1e-6 * float(np.max(np.abs(theirs), initial=0.0)) if single else 0.0
        np.testing.assert_allclose(ours, theirs, rtol=1e-6 if single else 1e-12, atol=max(atol, scale))


def _same_error(ours, theirs):
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(Exception) as got:
        ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)
    assert str(got.value).replace("daskgrad.Size", "torch.Size").replace("daskgrad._tensor.Tensor",
                                                                          "torch.Tensor") == str(expected.value)


# ------------------------------------------------------------------ margin losses
X = RNG.standard_normal((6, 5))
Y = np.array([0, 4, 2, 2, 1, 3])
X[0, 1] = X[0, 0] - 1.0  # a hinge exactly at 0: margin - x[y] + x[i] == 0 (torch's gradient there: 0)
LABELS = np.array([[0, 3, -1, 1, 1], [4, -1, 0, 0, 0], [2, 2, 1, -1, -1], [1, 0, 2, 3, 4], [-1, 1, 2, 3, 0],
                   [3, 1, -1, -1, -1]])  # a repeat counted twice, everything listed, nothing listed
X[5, 3] = X[5, 0] + 1.0  # a multilabel hinge exactly at 0: 1 - (x[3] - x[0]) == 0
CLASS_WEIGHT = RNG.uniform(0.5, 2.0, 5)

MULTI_MARGIN = [({}, ["none", "sum", "mean"]), ({"p": 2}, ["none", "mean"]), ({"margin": 0.3}, ["sum"]),
                ({"p": 2, "margin": 2.0, "weight": True}, ["none", "mean"]), ({"weight": True}, ["sum"])]


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("kwargs,reduction", [(k, r) for k, rs in MULTI_MARGIN for r in rs],
                         ids=[f"{k}-{r}" for k, rs in MULTI_MARGIN for r in rs])
def test_multi_margin_loss_is_torch_s(kwargs, reduction, chunking):
    (x, tx), (y, ty) = _pair(X, chunking), _pair(Y, chunking)
    pairs = [(x, tx)]
    ours_kw, theirs_kw = dict(kwargs, reduction=reduction), dict(kwargs, reduction=reduction)
    if kwargs.get("weight"):
        w, tw = _pair(CLASS_WEIGHT, grad=False)  # (torch's refuses a weight that requires grad)
        ours_kw["weight"], theirs_kw["weight"] = w, tw
    _compare(F.multi_margin_loss(x, y, **ours_kw), T.multi_margin_loss(tx, ty, **theirs_kw), pairs)


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_multilabel_margin_loss_is_torch_s(reduction, chunking):
    (x, tx), (y, ty) = _pair(X, chunking), _pair(LABELS, chunking)
    _compare(F.multilabel_margin_loss(x, y, reduction=reduction), T.multilabel_margin_loss(tx, ty, reduction=reduction),
             [(x, tx)])


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_the_margin_losses_of_one_sample_are_torch_s(reduction):
    (x, tx) = _pair(X[1])
    for target in (np.array(4), np.array([4])):
        (y, ty) = _pair(target)
        _compare(F.multi_margin_loss(x, y, reduction=reduction), T.multi_margin_loss(tx, ty, reduction=reduction),
                 [(x, tx)])
        tx.grad, x.grad = None, None
    (y, ty) = _pair(LABELS[0])
    _compare(F.multilabel_margin_loss(x, y, reduction=reduction),
             T.multilabel_margin_loss(tx, ty, reduction=reduction), [(x, tx)])


def _cosine_distance(m):
    return lambda a, b: 1.0 - m.nn.functional.cosine_similarity(a, b)


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("kwargs", [{}, {"swap": True, "margin": 2.0}, {"distance": True, "reduction": "none"},
                                    {"distance": True, "swap": True, "reduction": "sum"}])
def test_triplet_margin_with_distance_loss_is_torch_s(kwargs, chunking):
    a, p, n = X, RNG.standard_normal((6, 5)), RNG.standard_normal((6, 5))
    p[0] = a[0]  # a zero distance
    pairs = [_pair(v, chunking) for v in (a, p, n)]
    kwargs = dict(kwargs)
    use_distance = kwargs.pop("distance", False)
    ours = F.triplet_margin_with_distance_loss(*[d for d, _ in pairs], **kwargs,
                                               distance_function=_cosine_distance(dg) if use_distance else None)
    theirs = T.triplet_margin_with_distance_loss(*[t for _, t in pairs], **kwargs,
                                                 distance_function=_cosine_distance(torch) if use_distance else None)
    _compare(ours, theirs, pairs)


def test_margin_loss_errors_are_torch_s():
    (x, tx), (y, ty) = _pair(X, grad=False), _pair(Y)
    (lab, tlab) = _pair(LABELS)
    cases = [(lambda m, x, y: m.nn.functional.multi_margin_loss(x, y, p=3), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x, y[:4]), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x, y, reduction="bad"), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x, y, weight=m.ones(3, dtype=m.float64)), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x, y, weight=m.ones(1, 5, dtype=m.float64)), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x, y * 1.0), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x, y, weight=m.ones(5, requires_grad=True)), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x.reshape(2, 3, 5), y), None),
             (lambda m, x, y: m.nn.functional.multi_margin_loss(x[:, :0], y), None),
             (lambda m, x, y: m.nn.functional.multilabel_margin_loss(x, y), None),
             (lambda m, x, y: m.nn.functional.multilabel_margin_loss(x[:, :4], y), "labels"),
             (lambda m, x, y: m.nn.functional.multilabel_margin_loss(x, y, reduction="bad"), "labels"),
             (lambda m, x, y: m.nn.functional.triplet_margin_with_distance_loss(x, x, x, margin=0), None),
             (lambda m, x, y: m.nn.functional.triplet_margin_with_distance_loss(x, x, x[0]), None),
             (lambda m, x, y: m.nn.functional.triplet_margin_with_distance_loss(x, x, x, reduction="x"), None),
             (lambda m, x, y: m.nn.TripletMarginWithDistanceLoss(margin=-1.0), None),
             (lambda m, x, y: m.nn.MultiMarginLoss(p=0), None),
             (lambda m, x, y: m.nn.MultiMarginLoss(weight=m.ones(2, 2)), None)]
    for f, target in cases:
        yd, yt = (lab, tlab) if target == "labels" else (y, ty)
        _same_error(lambda: f(dg, x, yd), lambda: f(torch, tx, yt))


def test_targets_out_of_range_raise_torch_s_error_when_computed():
    x = dg.from_array(X, chunks=3)
    for bad in (5, -1):
        y = dg.from_array(np.where(np.arange(6) == 4, bad, Y), chunks=3)
        with pytest.raises(RuntimeError) as theirs:
            T.multi_margin_loss(torch.tensor(X), torch.tensor(y.numpy()))
        with pytest.raises(RuntimeError, match=f"^{theirs.value}$"):
            F.multi_margin_loss(x, y).item()
    for bad in (5, -2):
        labels = LABELS.copy()
        labels[3, 0] = bad
        with pytest.raises(RuntimeError) as theirs:
            T.multilabel_margin_loss(torch.tensor(X), torch.tensor(labels))
        with pytest.raises(RuntimeError, match=f"^{theirs.value}$"):
            F.multilabel_margin_loss(x, dg.from_array(labels, chunks=3)).item()


LOSS_MODULES = ["MultiMarginLoss()", "MultiMarginLoss(2, 0.5, reduction='sum')", "MultiLabelMarginLoss()",
                "MultiLabelMarginLoss(reduction='none')", "TripletMarginWithDistanceLoss()",
                "TripletMarginWithDistanceLoss(margin=2.0, swap=True)", "NLLLoss2d()", "NLLLoss2d(ignore_index=1)"]


@pytest.mark.parametrize("call", LOSS_MODULES)
def test_loss_modules_are_torch_s(call):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ours = eval("nn." + call)
    with warnings.catch_warnings(record=True) as expected:
        warnings.simplefilter("always")
        theirs = eval("torch.nn." + call)
    assert [(w.category, str(w.message)) for w in got] == [(w.category, str(w.message)) for w in expected]
    assert repr(ours) == repr(theirs)
    for key in ("reduction", "p", "margin", "swap", "ignore_index"):
        assert getattr(ours, key, None) == getattr(theirs, key, None), key
    name = type(theirs).__name__
    inputs = {"MultiMarginLoss": [X, Y], "MultiLabelMarginLoss": [X, LABELS], "NLLLoss2d": [X, Y],
              "TripletMarginWithDistanceLoss": [X, X[::-1].copy(), X * 0.5]}[name]
    pairs = [_pair(a, "uneven") for a in inputs]
    _compare(ours(*[d for d, _ in pairs]), theirs(*[t for _, t in pairs]), pairs)


def test_multi_margin_loss_module_holds_its_weight_as_a_buffer():
    ours, theirs = nn.MultiMarginLoss(weight=dg.tensor(CLASS_WEIGHT)), torch.nn.MultiMarginLoss(
        weight=torch.tensor(CLASS_WEIGHT))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    pairs = [_pair(X), _pair(Y)]
    _compare(ours(*[d for d, _ in pairs]), theirs(*[t for _, t in pairs]), pairs)


def test_triplet_module_with_a_distance_function_is_torch_s():
    ours = nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance(p=1.0), margin=0.5)
    theirs = torch.nn.TripletMarginWithDistanceLoss(distance_function=torch.nn.PairwiseDistance(p=1.0), margin=0.5)
    assert repr(ours) == repr(theirs)
    pairs = [_pair(a) for a in (X, X[::-1].copy(), X * 0.5)]
    _compare(ours(*[d for d, _ in pairs]), theirs(*[t for _, t in pairs]), pairs)


# ------------------------------------------------------------------ in-place forms
ACT = np.array([[-2.0, -1.0, -0.5, 0.0, 0.5], [1.0, 2.0, -3.0, 0.25, -0.25]] * 3)
INPLACE = {"relu_": ((), {}), "elu_": ((0.7,), {}), "celu_": ((), {"alpha": 1.5}), "selu_": ((), {}),
           "leaky_relu_": ((0.2,), {}), "hardtanh_": ((-0.5, 1.0), {}), "threshold_": ((0.25, 9.0), {}),
           "rrelu_": ((0.1, 0.3), {})}


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_forms_write_their_input_with_torch_s_values_and_gradients(name, chunking):
    args, kwargs = INPLACE[name]
    (leaf, tleaf) = _pair(ACT, chunking)
    x, tx = leaf * 1.0, tleaf * 1.0
    version = x._version
    ours, theirs = getattr(F, name)(x, *args, **kwargs), getattr(T, name)(tx, *args, **kwargs)
    assert ours is x and theirs is tx
    assert x._version == version + 1
    _compare(x, tx, [(leaf, tleaf)])


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_forms_refuse_a_leaf_that_requires_grad_as_torch(name):
    args, kwargs = INPLACE[name]
    (leaf, tleaf) = _pair(ACT)
    _same_error(lambda: getattr(F, name)(leaf, *args, **kwargs), lambda: getattr(T, name)(tleaf, *args, **kwargs))
    with dg.no_grad():  # (allowed under no_grad, as torch's)
        getattr(F, name)(leaf, *args, **kwargs)
    with torch.no_grad():
        getattr(T, name)(tleaf, *args, **kwargs)
    np.testing.assert_allclose(leaf.detach().numpy(), tleaf.detach().numpy(), rtol=1e-15)


@pytest.mark.parametrize("call", [lambda F, x: F.leaky_relu_(x, -0.5), lambda F, x: F.leaky_relu(x, -0.1, True),
                                  lambda F, x: F.elu_(x, -0.5), lambda F, x: F.celu_(x, -2.0),
                                  lambda F, x: F.elu(x, -0.5, inplace=True), lambda F, x: F.celu(x, -2.0, True),
                                  lambda F, x: F.rrelu_(x, -0.5, 0.3), lambda F, x: F.rrelu_(x, -0.5, 0.3, True)])
def test_a_negative_slope_in_place_computes_but_its_backward_raises_as_torch_s(call):
    results = []
    for m, f in ((dg, F), (torch, T)):
        x = m.tensor(ACT, requires_grad=True) * 1.0
        call(f, x)
        try:
            x.sum().backward()
            results.append(None)
        except RuntimeError as e:
            results.append(str(e))
    assert results[0] == results[1]


def test_hardtanh_inplace_of_crossed_bounds_is_torch_s_clamp():
    """torch's ``F.hardtanh`` refuses ``min_val > max_val``; its ``hardtanh_`` clamps everything to ``max_val``."""
    (leaf, tleaf) = _pair(ACT)
    x, tx = leaf * 1.0, tleaf * 1.0
    F.hardtanh_(x, 2.0, 1.0)
    T.hardtanh_(tx, 2.0, 1.0)
    _compare(x, tx, [(leaf, tleaf)])
    _same_error(lambda: F.hardtanh(x, 2.0, 1.0), lambda: T.hardtanh(tx, 2.0, 1.0))


def test_inplace_errors_are_torch_s():
    (x, tx) = _pair(ACT, grad=False)
    _same_error(lambda: F.celu_(x, 0.0), lambda: T.celu_(tx, 0.0))
    _same_error(lambda: F.rrelu_(x, 0.5, 0.2), lambda: T.rrelu_(tx, 0.5, 0.2))
    _same_error(lambda: F.threshold_(dg.tensor([True]), 0.0, 1.0), lambda: T.threshold_(torch.tensor([True]), 0.0, 1.0))


def test_leaky_relu_module_writes_in_place_as_torch_s():
    ours, theirs = nn.LeakyReLU(0.2, inplace=True), torch.nn.LeakyReLU(0.2, inplace=True)
    assert repr(ours) == repr(theirs)
    (leaf, tleaf) = _pair(ACT)
    x, tx = leaf * 1.0, tleaf * 1.0
    assert ours(x) is x and theirs(tx) is tx
    _compare(x, tx, [(leaf, tleaf)])


# ------------------------------------------------------------------ rrelu
@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("bounds", [(), (0.1, 0.3), (-0.2, 0.5), (0.25, 0.25)])
def test_rrelu_in_eval_is_torch_s_leaky_relu_of_the_mean_slope(bounds, chunking):
    (leaf, tleaf) = _pair(ACT, chunking)
    _compare(F.rrelu(leaf, *bounds), T.rrelu(tleaf, *bounds), [(leaf, tleaf)])


@pytest.mark.parametrize("inplace", [False, True])
def test_rrelu_in_training_draws_a_slope_per_negative_element_and_its_gradient_is_that_slope(inplace):
    lower, upper = 0.1, 0.3
    a = RNG.standard_normal((400, 50))
    a[0, :3] = [0.0, np.nan, -np.inf]
    leaf = dg.from_array(a, chunks=(150, 25), requires_grad=True)
    x = leaf * 1.0
    y = F.rrelu(x, lower, upper, training=True, inplace=inplace)
    assert (y is x) == inplace
    y.backward(dg.ones_like(y))
    out, grad = dg.compute(y.detach(), leaf.grad)
    negative = (a < 0) & np.isfinite(a)
    slopes = out[negative] / a[negative]
    assert np.all(slopes >= lower) and np.all(slopes <= upper)
    np.testing.assert_allclose(grad[negative], slopes, rtol=1e-12)  # the gradient is the drawn slope
    np.testing.assert_array_equal(out[a > 0], a[a > 0])
    np.testing.assert_array_equal(grad[a > 0], 1.0)
    assert out[0, 0] == 0 and lower <= grad[0, 0] <= upper  # (0 is on the drawn side, as torch's ``x <= 0``)
    assert np.isnan(out[0, 1]) and grad[0, 1] == 1.0  # (NaN on the identity side)
    n = slopes.size
    finite = slopes
    # uniform on [lower, upper]: mean and variance within 5 standard errors
    assert abs(finite.mean() - (lower + upper) / 2) < 5 * (upper - lower) / math.sqrt(12 * n)
    assert abs(finite.var() - (upper - lower) ** 2 / 12) < 5 * (upper - lower) ** 2 / (math.sqrt(180) * math.sqrt(n))
    assert len(np.unique(finite)) > 0.99 * finite.size  # one draw per element


def test_rrelu_module_is_torch_s_and_draws_only_while_training():
    for args in ((), (0.1, 0.3), (0.1, 0.3, True)):
        assert repr(nn.RReLU(*args)) == repr(torch.nn.RReLU(*args))
    ours, theirs = nn.RReLU(0.1, 0.3), torch.nn.RReLU(0.1, 0.3)
    (x, tx) = _pair(ACT)
    _compare(ours.eval()(x), theirs.eval()(tx), [(x, tx)])
    y = ours.train()(dg.tensor(ACT)).numpy()
    slopes = y[ACT < 0] / ACT[ACT < 0]
    assert np.all((slopes >= 0.1) & (slopes <= 0.3)) and len(np.unique(slopes)) > 1


# ------------------------------------------------------------------ bilinear
@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("bias", [True, False])
def test_bilinear_is_torch_s(bias, chunking):
    a, b = RNG.standard_normal((6, 4)), RNG.standard_normal((6, 3))
    w, c = RNG.standard_normal((2, 4, 3)), RNG.standard_normal(2)
    pairs = [_pair(a, chunking), _pair(b, chunking), _pair(w)] + ([_pair(c)] if bias else [])
    _compare(F.bilinear(*[d for d, _ in pairs]), T.bilinear(*[t for _, t in pairs]), pairs)


def test_bilinear_of_batched_and_unbatched_inputs_is_torch_s():
    w = _pair(RNG.standard_normal((2, 4, 3)))
    for shape in ((6, 2), ()):
        pairs = [_pair(RNG.standard_normal(shape + (4,))), _pair(RNG.standard_normal(shape + (3,))), w]
        _compare(F.bilinear(*[d for d, _ in pairs]), T.bilinear(*[t for _, t in pairs]), pairs)
        w[0].grad, w[1].grad = None, None


def test_bilinear_errors_are_torch_s():
    x, tx = _pair(RNG.standard_normal((3, 4)), grad=False)
    for w, b, other in [((5, 4, 3), None, None), ((5, 3, 4), None, None), ((5, 4, 4), (4,), None),
                        ((4, 4), None, None), ((5, 4, 4), None, "rows"), ((5, 4, 4), None, "axes"),
                        ((5, 4, 4), (5,), "float32"), ((5, 4, 4), (1, 5), None)]:
        wd, wt = _pair(np.ones(w), grad=False)
        bd, bt = _pair(np.ones(b), grad=False) if b else (None, None)
        if other == "float32":
            bd, bt = bd.float(), bt.float()
        od, ot = {"rows": (x[:2], tx[:2]), "axes": (x[:, None], tx[:, None])}.get(other, (x, tx))
        _same_error(lambda: F.bilinear(x, od, wd, bd), lambda: T.bilinear(tx, ot, wt, bt))


def test_bilinear_module_is_torch_s():
    for args in ((2, 3, 4), (2, 3, 4, False)):
        ours, theirs = nn.Bilinear(*args, dtype="float64"), torch.nn.Bilinear(*args, dtype=torch.float64)
        assert repr(ours) == repr(theirs)
        assert [(k, tuple(v.shape)) for k, v in ours.named_parameters()] == [
            (k, tuple(v.shape)) for k, v in theirs.named_parameters()]
        bound = 1 / math.sqrt(2)
        assert all(np.abs(p.detach().numpy()).max() <= bound for p in ours.parameters())
        ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
        pairs = [_pair(RNG.standard_normal((6, 2))), _pair(RNG.standard_normal((6, 3)))]
        _compare(ours(*[d for d, _ in pairs]), theirs(*[t for _, t in pairs]), pairs)
    _same_error(lambda: nn.Bilinear(0, 3, 4), lambda: torch.nn.Bilinear(0, 3, 4))


# ------------------------------------------------------------------ pdist
PD = RNG.standard_normal((6, 4))
PD[3] = PD[1]  # a zero distance
PD[4, :2] = PD[0, :2] + np.array([1.0, -1.0])  # a tie of the largest coordinates (p = inf)
PD[4, 2:] = PD[0, 2:] + np.array([0.5, 1.0])


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("p", [2, 1, 3.0, 0.5, 0, math.inf])
def test_pdist_is_torch_s(p, chunking):
    pair = _pair(PD, chunking)
    _compare(F.pdist(pair[0], p), T.pdist(pair[1], p), [pair], atol=1e-14)


def test_pdist_of_fewer_than_two_rows_and_its_errors_are_torch_s():
    for rows in (0, 1):
        assert F.pdist(dg.ones(rows, 3, dtype="float64")).shape == tuple(T.pdist(torch.ones(rows, 3)).shape) == (0,)
    _same_error(lambda: F.pdist(dg.ones(2, 3, 4)), lambda: T.pdist(torch.ones(2, 3, 4)))
    _same_error(lambda: F.pdist(dg.ones(2, 3, dtype="int64")), lambda: T.pdist(torch.ones(2, 3, dtype=torch.long)))
    _same_error(lambda: F.pdist(dg.ones(2, 3), -1.0), lambda: T.pdist(torch.ones(2, 3), -1.0))


# ------------------------------------------------------------------ gumbel_softmax
def test_gumbel_softmax_samples_follow_the_softmax_of_the_logits():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    n = 4000
    x = dg.from_array(np.tile(logits, (n, 1)), chunks=(1500, 4))
    soft, hard = F.gumbel_softmax(x, tau=0.5), F.gumbel_softmax(x, hard=True)
    soft, hard = dg.compute(soft, hard)
    np.testing.assert_allclose(soft.sum(1), 1.0, rtol=1e-12)
    assert set(np.unique(hard)) == {0.0, 1.0} and np.all(hard.sum(1) == 1)
    freq = hard.mean(0)
    p = np.exp(logits)
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n))  # (Gumbel-max: argmax ~ softmax(logits))
    np.testing.assert_allclose(np.bincount(soft.argmax(1), minlength=4) / n, p, atol=5 * 0.5 / math.sqrt(n))


@pytest.mark.parametrize("dim", [-1, 0])
def test_hard_gumbel_softmax_is_the_one_hot_of_the_soft_sample_with_its_gradient(dim):
    """Straight through: with the same draws (the same seed), the hard sample is the one-hot of the soft one's
    largest entry along ``dim``, and its gradient is the soft sample's."""
    a = RNG.standard_normal((6, 5))
    g = dg.tensor(RNG.standard_normal((6, 5)))
    results = []
    for hard in (False, True):
        leaf = dg.from_array(a, chunks=(3, 5), requires_grad=True)
        dg.manual_seed(11)
        y = F.gumbel_softmax(leaf, tau=0.7, hard=hard, dim=dim)
        y.backward(g)
        results.append(dg.compute(y.detach(), leaf.grad))
    (soft, soft_grad), (hard, hard_grad) = results
    np.testing.assert_array_equal(hard, soft == soft.max(dim, keepdims=True))
    np.testing.assert_allclose(hard_grad, soft_grad, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(soft_grad.sum(dim), 0.0, atol=1e-12)  # (softmax's gradient sums to 0 along dim)


def test_gumbel_softmax_warns_of_eps_as_torch_s():
    x = dg.tensor(np.zeros((2, 3)))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        F.gumbel_softmax(x, eps=1e-3)
    with warnings.catch_warnings(record=True) as expected:
        warnings.simplefilter("always")
        T.gumbel_softmax(torch.zeros(2, 3), eps=1e-3)
    assert [str(w.message) for w in got] == [str(w.message) for w in expected]


# ------------------------------------------------------------------ embedding_bag
TABLE = RNG.standard_normal((10, 3))
TABLE[7] = TABLE[4]  # two equal rows: a tie of the max, which torch gives to the first in the bag
BAG_INPUT = np.array([1, 2, 4, 5, 7, 3, 2, 9, 2, 2, 4, 7])
BAG_OFFSETS = np.array([0, 3, 3, 8])  # an empty bag
BAG_CASES = [(mode, last, pad, psw) for mode in ("sum", "mean", "max") for last in (False, True)
             for pad in (None, 2, -1) for psw in ((False, True) if mode == "sum" else (False,))]


@pytest.mark.parametrize("chunks", [-1, 5])
@pytest.mark.parametrize("mode,include_last_offset,padding_idx,weighted", BAG_CASES,
                         ids=[f"{m}-last{int(last)}-pad{p}-psw{int(w)}" for m, last, p, w in BAG_CASES])
def test_embedding_bag_of_offsets_is_torch_s(mode, include_last_offset, padding_idx, weighted, chunks):
    w, tw = _pair(TABLE)
    index = dg.from_array(BAG_INPUT, chunks=chunks)
    psw = RNG.standard_normal(BAG_INPUT.shape) if weighted else None
    (p, tp) = _pair(psw) if weighted else (None, None)
    kwargs = dict(mode=mode, include_last_offset=include_last_offset, padding_idx=padding_idx)
    # (with include_last_offset, the last offset is the input's length, as torch documents: torch's kernels disagree
    # on any other)
    offsets = np.append(BAG_OFFSETS, len(BAG_INPUT)) if include_last_offset else BAG_OFFSETS
    ours = F.embedding_bag(index, w, dg.tensor(offsets), per_sample_weights=p, **kwargs)
    theirs = T.embedding_bag(torch.tensor(BAG_INPUT), tw, torch.tensor(offsets), per_sample_weights=tp, **kwargs)
    _compare(ours, theirs, [(w, tw)] + ([(p, tp)] if weighted else []), atol=1e-14)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_a_2d_input_is_its_rows_as_torch_s(mode):
    rows = BAG_INPUT.reshape(6, 2)
    w, tw = _pair(TABLE)
    pairs = [(w, tw)]
    ours_kw, theirs_kw = {"mode": mode, "padding_idx": 7}, {"mode": mode, "padding_idx": 7}
    if mode == "sum":
        p, tp = _pair(RNG.standard_normal((6, 2)), "uneven")
        ours_kw["per_sample_weights"], theirs_kw["per_sample_weights"] = p, tp
        pairs.append((p, tp))
    _compare(F.embedding_bag(dg.from_array(rows, chunks=((2, 4), 2)), w, **ours_kw),
             T.embedding_bag(torch.tensor(rows), tw, **theirs_kw), pairs, atol=1e-14)


def test_embedding_bag_errors_are_torch_s():
    w, tw = _pair(TABLE, grad=False)
    i, ti = _pair(BAG_INPUT)
    o, to = _pair(np.array([0, 3]))
    cases = [lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, mode="bad"),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i * 1.0, w, o),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, per_sample_weights=m.ones(12, dtype=w.dtype),
                                                              mode="mean"),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, per_sample_weights=m.ones(11, dtype=w.dtype),
                                                              mode="sum"),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, per_sample_weights=m.ones(12), mode="sum"),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i.reshape(2, 6), w, o),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w[0], o),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i.reshape(2, 3, 2), w),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o.reshape(1, 2)),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, mode="max", scale_grad_by_freq=True),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, padding_idx=12),
             lambda m, w, i, o: m.nn.functional.embedding_bag(i, w, o, padding_idx=-11)]
    for f in cases:
        _same_error(lambda: f(dg, w, i, o), lambda: f(torch, tw, ti, to))


def test_embedding_bag_s_last_offset_ends_the_last_bag_with_include_last_offset():
    """As torch documents it, and its float32 'sum' kernel computes (its float64 kernels end the bag with the
    input): the indices after the last offset are in no bag."""
    w = TABLE.astype(np.float32)
    ours = F.embedding_bag(dg.tensor(BAG_INPUT), dg.tensor(w), dg.tensor(BAG_OFFSETS), mode="sum",
                           include_last_offset=True)
    theirs = T.embedding_bag(torch.tensor(BAG_INPUT), torch.tensor(w), torch.tensor(BAG_OFFSETS), mode="sum",
                             include_last_offset=True)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert ours.shape == (3, 3)


def test_embedding_bag_value_errors_raise_torch_s_when_computed():
    w = dg.tensor(TABLE)
    for index, offsets in ((BAG_INPUT, np.array([1, 3])), (BAG_INPUT, np.array([0, 13])),
                           (np.where(BAG_INPUT == 9, 12, BAG_INPUT), BAG_OFFSETS)):
        with pytest.raises(RuntimeError) as theirs:
            T.embedding_bag(torch.tensor(index), torch.tensor(TABLE), torch.tensor(offsets))
        ours = F.embedding_bag(dg.from_array(index, chunks=5), w, dg.tensor(offsets))
        with pytest.raises(RuntimeError) as got:
            ours.numpy()
        assert str(got.value) == str(theirs.value)


def test_embedding_bag_module_is_torch_s():
    for kwargs in ({}, {"mode": "max", "padding_idx": -2}, {"mode": "sum", "include_last_offset": True}):
        ours, theirs = nn.EmbeddingBag(10, 3, **kwargs), torch.nn.EmbeddingBag(10, 3, **kwargs)
        assert repr(ours) == repr(theirs)
        for key in ("mode", "padding_idx", "include_last_offset", "max_norm", "norm_type", "scale_grad_by_freq"):
            assert getattr(ours, key) == getattr(theirs, key), key
        if ours.padding_idx is not None:
            assert not ours.weight.detach().numpy()[ours.padding_idx].any()
        ours.load_state_dict({"weight": dg.tensor(theirs.weight.detach().numpy())})
        offsets = np.append(BAG_OFFSETS, len(BAG_INPUT)) if ours.include_last_offset else BAG_OFFSETS
        _compare(ours(dg.tensor(BAG_INPUT), dg.tensor(offsets)),
                 theirs(torch.tensor(BAG_INPUT), torch.tensor(offsets)), [(ours.weight, theirs.weight)])
    ours = nn.EmbeddingBag.from_pretrained(dg.tensor(TABLE), mode="max")
    theirs = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(TABLE), mode="max")
    assert repr(ours) == repr(theirs) and ours.weight.requires_grad == theirs.weight.requires_grad is False
    y, ty = ours(dg.tensor(BAG_INPUT.reshape(4, 3))), theirs(torch.tensor(BAG_INPUT.reshape(4, 3)))
    assert not y.requires_grad and not ty.requires_grad
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="max_norm"):
        nn.EmbeddingBag(10, 3, max_norm=1.0)


def test_embedding_bag_takes_torch_s_old_argument_order_with_its_warning():
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ours = F.embedding_bag(dg.tensor(TABLE), dg.tensor(BAG_INPUT), dg.tensor(BAG_OFFSETS))
    with warnings.catch_warnings(record=True) as expected:
        warnings.simplefilter("always")
        theirs = T.embedding_bag(torch.tensor(TABLE), torch.tensor(BAG_INPUT), torch.tensor(BAG_OFFSETS))
    assert [str(w.message) for w in got] == [str(w.message) for w in expected]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
