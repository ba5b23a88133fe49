"""torch.nn's losses and distances (kl_div, binary_cross_entropy, poisson_nll_loss, gaussian_nll_loss,
margin_ranking_loss, hinge_embedding_loss, soft_margin_loss, multilabel_soft_margin_loss, cosine_embedding_loss,
triplet_margin_loss, cosine_similarity, pairwise_distance and their modules) against torch (installed): float64
values and the gradients of every input that takes one equal to torch's at rtol 1e-12 (1e-15 absolutely where a sum
adds chunks in another order), at each reduction, on inputs with the points where torch's kernels choose a side
(a zero target, a probability of 0 or 1, a tie at a hinge, a variance under ``eps``, a zero row), in one chunk,
even chunks and uneven chunks along every axis; module reprs and errors are torch's."""
import ast
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
# (NumPy's warnings where torch's answer is NaN or infinite: 0 / 0 and log 0 at the boundaries)
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")]

RNG = np.random.default_rng(0)
CHUNKINGS = {"one": {6: -1, 5: -1}, "even": {6: 3, 5: 3}, "uneven": {6: (2, 4), 5: (1, 4)}}  # by axis length
REDUCTIONS = ["none", "sum", "mean"]


def _data():
    """Named (6, 5) and (6,) inputs holding each function's special points."""
    x, y, z = (RNG.standard_normal((6, 5)) for _ in range(3))
    x[0] = y[0]  # a tie: x - y = 0 (hinges, distances)
    z[1] = 0.0  # a zero row (cosines)
    prob = RNG.uniform(0.05, 0.95, (6, 5))
    prob[0, :4] = [0.0, 1.0, 1e-50, 1 - 1e-16]
    target01 = RNG.uniform(0, 1, (6, 5))
    target01[1, :3] = [0.0, 1.0, 0.5]
    dist = RNG.dirichlet(np.ones(5), 6)
    dist[2, :2] = 0.0  # zero targets: kl_div's 0 log 0
    counts = RNG.poisson(2.0, (6, 5)).astype(float)
    counts[3, :3] = [0.0, 1.0, 2.5]
    var = RNG.uniform(0.1, 2.0, (6, 5))
    var[4, :2] = [1e-8, 0.0]  # under eps: clamped
    sign = np.where(RNG.uniform(size=(6, 5)) > 0.5, 1.0, -1.0)
    row_sign = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
    hinge_target = sign.copy()
    hinge_target[5, :2] = [0.0, 2.0]  # neither 1 nor -1: both terms
    return dict(x=x, y=y, z=z, prob=prob, target01=target01, dist=dist, logdist=np.log(dist + 0.1), counts=counts,
                positive=np.abs(x) + 0.01, var=var, var_rows=var[:, 0], var_col=var[:, :1], sign=sign,
                row_sign=row_sign, x_row=x[:, 0], y_row=np.where(row_sign > 0, x[:, 0], y[:, 0]),
                hinge_target=hinge_target, weight=RNG.uniform(0.5, 2.0, (6, 5)), class_weight=RNG.uniform(0.5, 2, 5),
                hinge_x=np.where(RNG.uniform(size=(6, 5)) > 0.8, 1.0, x), minus=np.array(-1.0))


D = _data()
# id -> (function, [(array name, takes a gradient)], keyword arguments, reductions)
CASES = {
    "kl_div": ("kl_div", [("x", True), ("dist", True)], {}, REDUCTIONS + ["batchmean"]),
    "kl_div-log_target": ("kl_div", [("x", True), ("logdist", True)], {"log_target": True}, REDUCTIONS + ["batchmean"]),
    "bce": ("binary_cross_entropy", [("prob", True), ("target01", True)], {}, REDUCTIONS),
    "bce-weight": ("binary_cross_entropy", [("prob", True), ("target01", True), ("weight", False)], {}, REDUCTIONS),
    "bce-row-weight": ("binary_cross_entropy", [("prob", True), ("target01", True), ("class_weight", False)], {},
                       ["mean"]),
    "poisson": ("poisson_nll_loss", [("x", True), ("counts", True)], {}, REDUCTIONS),
    "poisson-full": ("poisson_nll_loss", [("x", True), ("counts", True)], {"full": True}, ["none"]),
    "poisson-rate": ("poisson_nll_loss", [("positive", True), ("counts", True)], {"log_input": False, "full": True},
                     REDUCTIONS),
    "gaussian": ("gaussian_nll_loss", [("x", True), ("y", True), ("var", True)], {}, REDUCTIONS),
    "gaussian-full-rows": ("gaussian_nll_loss", [("x", True), ("y", True), ("var_rows", True)],
                           {"full": True, "eps": 0.2}, ["none", "mean"]),
    "gaussian-col": ("gaussian_nll_loss", [("x", True), ("y", True), ("var_col", True)], {}, ["sum"]),
    "margin_ranking": ("margin_ranking_loss", [("x_row", True), ("y_row", True), ("row_sign", False)], {}, REDUCTIONS),
    "margin_ranking-margin": ("margin_ranking_loss", [("x", True), ("y", True), ("sign", False)], {"margin": 0.5},
                              ["mean"]),
    "hinge_embedding": ("hinge_embedding_loss", [("hinge_x", True), ("hinge_target", False)], {}, REDUCTIONS),
    "hinge_embedding-margin": ("hinge_embedding_loss", [("x", True), ("sign", False)], {"margin": 0.3}, ["mean"]),
    "soft_margin": ("soft_margin_loss", [("x", True), ("sign", False)], {}, REDUCTIONS),
    "multilabel_soft_margin": ("multilabel_soft_margin_loss", [("x", True), ("target01", True)], {}, REDUCTIONS),
    "multilabel_soft_margin-weight": ("multilabel_soft_margin_loss", [("x", True), ("target01", True),
                                                                       ("class_weight", True)], {}, ["mean"]),
    "cosine_embedding": ("cosine_embedding_loss", [("x", True), ("z", True), ("row_sign", False)], {}, REDUCTIONS),
    "cosine_embedding-margin": ("cosine_embedding_loss", [("x", True), ("y", True), ("row_sign", False)],
                                {"margin": 0.2}, ["sum"]),
    "triplet": ("triplet_margin_loss", [("x", True), ("y", True), ("z", True)], {}, REDUCTIONS),
    "triplet-p1-swap": ("triplet_margin_loss", [("x", True), ("y", True), ("z", True)],
                        {"p": 1, "swap": True, "margin": 3.0}, ["none"]),
    "triplet-p3-swap": ("triplet_margin_loss", [("x", True), ("z", True), ("y", True)],
                        {"p": 3, "swap": True, "margin": 2.0}, ["mean"]),
    "triplet-swap-tie": ("triplet_margin_loss", [("x", True), ("x", True), ("z", True)], {"swap": True}, ["sum"]),
    "kl_div-1d": ("kl_div", [("x_row", True), ("y_row", True)], {}, ["batchmean"]),
    "multilabel_soft_margin-1d": ("multilabel_soft_margin_loss", [("x_row", True), ("y_row", True)], {}, ["none"]),
    "cosine_embedding-1d": ("cosine_embedding_loss", [("x_row", True), ("y_row", True), ("minus", False)],
                            {"margin": -0.5}, ["none", "mean"]),
    "cosine_similarity": ("cosine_similarity", [("x", True), ("z", True)], {}, [None]),
    "cosine_similarity-dim0": ("cosine_similarity", [("x", True), ("z", True)], {"dim": 0, "eps": 0.5}, [None]),
    "cosine_similarity-broadcast": ("cosine_similarity", [("x", True), ("class_weight", True)], {"dim": -1}, [None]),
    "pairwise_distance": ("pairwise_distance", [("x", True), ("y", True)], {}, [None]),
    "pairwise_distance-p1-keepdim": ("pairwise_distance", [("x", True), ("y", True)], {"p": 1, "keepdim": True},
                                     [None]),
    "pairwise_distance-p3": ("pairwise_distance", [("x", True), ("z", True)], {"p": 3.0, "eps": 0.0}, [None]),
    "pairwise_distance-inf": ("pairwise_distance", [("x", True), ("z", True)], {"p": float("inf")}, [None]),
    "pairwise_distance-inf-tie": ("pairwise_distance", [("x", True), ("y", True)], {"p": float("inf")}, [None]),
    "pairwise_distance-p0": ("pairwise_distance", [("x", True), ("y", True)], {"p": 0, "eps": 0.0}, [None]),
    "pairwise_distance-1d": ("pairwise_distance", [("x_row", True), ("y_row", True)], {"p": 1.5}, [None]),
    "pairwise_distance-broadcast": ("pairwise_distance", [("x", True), ("class_weight", True)], {}, [None]),
}
PARAMS = [(case, reduction) for case, (_, _, _, reductions) in CASES.items() for reduction in reductions]


def _same(ours, theirs, atol=0.0):
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12, atol=atol, equal_nan=True)


def _values_and_gradients(yd, yt, inputs, atol=0.0):
    """Both backward with the same random cotangent; our output and gradients in one submission, compared."""
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    yt.backward(torch.tensor(g))
    assert [d.grad is None for d, _ in inputs] == [t.grad is None for _, t in inputs]  # (a 0-norm's: none)
    inputs = [(d, t) for d, t in inputs if t.grad is not None]
    got = dg.compute(yd.detach(), *[d.grad for d, _ in inputs])
    for ours, theirs in zip(got, [yt] + [t.grad for _, t in inputs]):
        _same(ours, theirs, atol)


def _inputs(args, chunking):
    pairs = []
    for name, grad in args:
        a = D[name]
        chunks = tuple(CHUNKINGS[chunking].get(n, -1) for n in a.shape)
        pairs.append((dg.from_array(a, chunks=chunks, requires_grad=grad), torch.tensor(a, requires_grad=grad)))
    return pairs


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case,reduction", PARAMS, ids=[f"{c}-{r}" if r else c for c, r in PARAMS])
def test_values_and_gradients_are_torch_s(case, reduction, chunking):
    name, args, kwargs, _ = CASES[case]
    kwargs = {**kwargs, **({"reduction": reduction} if reduction else {})}
    pairs = _inputs(args, chunking)
    ours = getattr(F, name)(*[d for d, _ in pairs], **kwargs)
    theirs = getattr(torch.nn.functional, name)(*[t for _, t in pairs], **kwargs)
    assert ours.shape == tuple(theirs.shape)
    _values_and_gradients(ours, theirs, [p for p, (_, grad) in zip(pairs, args) if grad], atol=1e-15)


def test_float32_stays_float32():
    x = dg.from_array(D["prob"].astype("float32"), chunks=3)
    assert F.binary_cross_entropy(x, x).dtype == np.float32
    assert F.soft_margin_loss(x, x).dtype == np.float32
    assert F.cosine_similarity(x, x).dtype == np.float32
    ints = dg.from_array(np.arange(30).reshape(6, 5) - 7, chunks=3)
    for other in (x, dg.from_array(D["x"], chunks=2)):  # (the integer operand cast to the other's dtype: torch's)
        ours = F.cosine_similarity(ints, other)
        theirs = torch.nn.functional.cosine_similarity(torch.tensor(ints.numpy()), torch.tensor(other.numpy()))
        assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch."))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6 if ours.dtype == np.float32 else 1e-12)


MODULES = ["KLDivLoss()", "KLDivLoss(reduction='batchmean', log_target=True)", "BCELoss()", "BCELoss(reduction='sum')",
           "PoissonNLLLoss()", "PoissonNLLLoss(False, True, eps=0.5)", "GaussianNLLLoss()",
           "GaussianNLLLoss(full=True, eps=0.1, reduction='none')", "MarginRankingLoss()", "MarginRankingLoss(0.5)",
           "HingeEmbeddingLoss()", "HingeEmbeddingLoss(margin=2.0)", "SoftMarginLoss()",
           "SoftMarginLoss(reduction='sum')", "MultiLabelSoftMarginLoss()", "CosineEmbeddingLoss()",
           "CosineEmbeddingLoss(0.1, reduction='none')", "TripletMarginLoss()",
           "TripletMarginLoss(2.0, 1.0, swap=True)", "CosineSimilarity()", "CosineSimilarity(0, 1e-3)",
           "PairwiseDistance()", "PairwiseDistance(1.0, keepdim=True)"]
# the module's inputs, as CASES' arrays
MODULE_INPUTS = {"KLDivLoss": ["x", "logdist"], "BCELoss": ["prob", "target01"],
                 "PoissonNLLLoss": ["positive", "counts"],
                 "GaussianNLLLoss": ["x", "y", "var"], "MarginRankingLoss": ["x", "y", "sign"],
                 "HingeEmbeddingLoss": ["x", "hinge_target"], "SoftMarginLoss": ["x", "sign"],
                 "MultiLabelSoftMarginLoss": ["x", "target01"], "CosineEmbeddingLoss": ["x", "z", "row_sign"],
                 "TripletMarginLoss": ["x", "y", "z"], "CosineSimilarity": ["x", "z"], "PairwiseDistance": ["x", "y"]}


def _make(module, call):
    """``module.Name(args...)`` from the text ``"Name(args...)"``, the arguments as Python literals."""
    name, args = call.split("(", 1)
    positional, keywords = [], {}
    for part in filter(None, args.rstrip(")").split(", ")):
        if "=" in part:
            key, value = part.split("=")
            keywords[key] = ast.literal_eval(value)
        else:
            positional.append(ast.literal_eval(part))
    return getattr(module, name)(*positional, **keywords)


@pytest.mark.parametrize("call", MODULES)
def test_modules_are_torch_s_in_repr_attributes_values_and_gradients(call):
    ours, theirs = _make(nn, call), _make(torch.nn, call)
    assert repr(ours) == repr(theirs)
    for key in ("reduction", "log_target", "log_input", "full", "eps", "margin", "p", "swap", "dim", "norm", "keepdim"):
        assert getattr(ours, key, None) == getattr(theirs, key, None), key
    names = MODULE_INPUTS[type(theirs).__name__]
    pairs = _inputs([(n, n not in ("sign", "row_sign", "hinge_target")) for n in names], "uneven")
    _values_and_gradients(ours(*[d for d, _ in pairs]), theirs(*[t for _, t in pairs]),
                          [p for p, n in zip(pairs, names) if n not in ("sign", "row_sign", "hinge_target")],
                          atol=1e-15)


def test_weighted_modules_hold_their_weight_as_a_buffer():
    w = D["class_weight"]
    for name in ("BCELoss", "MultiLabelSoftMarginLoss"):
        ours, theirs = getattr(nn, name)(dg.tensor(w)), getattr(torch.nn, name)(torch.tensor(w))
        assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
        pairs = _inputs([("prob", True), ("target01", False)], "even")
        _values_and_gradients(ours(*[d for d, _ in pairs]), theirs(*[t for _, t in pairs]), pairs[:1])


def _same_error(ours, theirs):
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(Exception) as got:
        ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)
    assert str(got.value).replace("daskgrad.Size", "torch.Size") == str(expected.value), (got.value, expected.value)


def _pair(*shape):
    a = np.full(shape, 0.5)
    return dg.tensor(a), torch.tensor(a)


def test_bad_arguments_raise_torch_s_errors():
    (a, ta), (b, tb), (r, tr), (s, ts) = _pair(3, 4), _pair(3, 4), _pair(3), _pair()
    T = torch.nn.functional
    for reduction in ("bad", "batchmean"):
        for name in ("binary_cross_entropy", "poisson_nll_loss", "gaussian_nll_loss", "soft_margin_loss",
                     "multilabel_soft_margin_loss", "hinge_embedding_loss"):
            extra = (b, a) if name == "gaussian_nll_loss" else (b,)
            textra = (tb, ta) if name == "gaussian_nll_loss" else (tb,)
            _same_error(lambda: getattr(F, name)(a, *extra, reduction=reduction),
                        lambda: getattr(T, name)(ta, *textra, reduction=reduction))
    _same_error(lambda: F.kl_div(a, b, reduction="bad"), lambda: T.kl_div(ta, tb, reduction="bad"))
    _same_error(lambda: F.binary_cross_entropy(a, r), lambda: T.binary_cross_entropy(ta, tr))
    _same_error(lambda: F.binary_cross_entropy(a, b, weight=dg.ones(4, requires_grad=True)),
                lambda: T.binary_cross_entropy(ta, tb, weight=torch.ones(4, requires_grad=True)))
    for w in (np.ones(3), np.ones((2, 4))):
        _same_error(lambda: F.binary_cross_entropy(a, b, weight=dg.tensor(w)),
                    lambda: T.binary_cross_entropy(ta, tb, weight=torch.tensor(w)))
    _same_error(lambda: F.soft_margin_loss(a, b.requires_grad_()), lambda: T.soft_margin_loss(ta, tb.requires_grad_()))
    _same_error(lambda: F.gaussian_nll_loss(a, b, _pair(3, 3)[0]), lambda: T.gaussian_nll_loss(ta, tb, _pair(3, 3)[1]))
    _same_error(lambda: F.gaussian_nll_loss(a, b, -1.0), lambda: T.gaussian_nll_loss(ta, tb, -1.0))
    _same_error(lambda: F.margin_ranking_loss(r, a, r), lambda: T.margin_ranking_loss(tr, ta, tr))
    _same_error(lambda: F.cosine_embedding_loss(a, b, a), lambda: T.cosine_embedding_loss(ta, tb, ta))
    _same_error(lambda: F.cosine_embedding_loss(a, r, r), lambda: T.cosine_embedding_loss(ta, tr, tr))
    _same_error(lambda: F.cosine_embedding_loss(a, b, s), lambda: T.cosine_embedding_loss(ta, tb, ts))
    _same_error(lambda: F.triplet_margin_loss(a, b, r), lambda: T.triplet_margin_loss(ta, tb, tr))
    _same_error(lambda: F.triplet_margin_loss(a, b, b, margin=0), lambda: T.triplet_margin_loss(ta, tb, tb, margin=0))
    _same_error(lambda: nn.TripletMarginLoss(-1.0), lambda: torch.nn.TripletMarginLoss(-1.0))
    _same_error(lambda: F.cosine_similarity(a, b, dim=2), lambda: T.cosine_similarity(ta, tb, dim=2))
    _same_error(lambda: F.cosine_similarity(dg.ones((3, 4), dtype="int64"), dg.ones((3, 4), dtype="int64")),
                lambda: T.cosine_similarity(torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long)))
    _same_error(lambda: F.kl_div(dg.ones(3, dtype="int64"), r), lambda: T.kl_div(torch.ones(3, dtype=torch.long), tr))


def test_value_checks_run_when_the_values_are_computed():
    """torch checks an input's values eagerly; daskgrad's are lazy, so the task reading them raises torch's error."""
    bad = dg.from_array(np.array([0.5, 1.5, 0.2]), chunks=2)
    with pytest.raises(RuntimeError, match="^all elements of input should be between 0 and 1$"):
        F.binary_cross_entropy(bad, bad * 0).item()
    with pytest.raises(RuntimeError, match="^all elements of target should be between 0 and 1$"):
        F.binary_cross_entropy(bad * 0.1, bad).item()
    x = dg.from_array(np.ones(4), chunks=2)
    with pytest.raises(ValueError, match="^var has negative entry/entries$"):
        F.gaussian_nll_loss(x, x, dg.from_array(np.array([1.0, 1.0, -1.0, 1.0]), chunks=2)).item()


def test_legacy_and_mean_warnings_are_torch_s():
    (a, ta), (b, tb) = _pair(3, 4), _pair(3, 4)
    for fd, ft in ((F, torch.nn.functional),):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            ours = fd.kl_div(a, b)
            ours_legacy = fd.soft_margin_loss(a, b, size_average=False)
        with warnings.catch_warnings(record=True) as expected:
            warnings.simplefilter("always")
            theirs = ft.kl_div(ta, tb)
            theirs_legacy = ft.soft_margin_loss(ta, tb, size_average=False)
        assert [str(w.message) for w in got] == [str(w.message) for w in expected]
        _same(ours.numpy(), theirs)
        _same(ours_legacy.numpy(), theirs_legacy)


@pytest.mark.parametrize("written", ["input", "target", "weight"])
def test_a_write_of_what_binary_cross_entropy_saved_makes_the_backward_raise(written):
    """torch's kernel saves its input, target and weight (tests/test_inplace_guards.py's inputs are out of [0, 1])."""
    for m in (torch, dg):
        leaves = {k: m.tensor(D[k][:2, :3], requires_grad=k != "weight") for k in ("prob", "target01", "weight")}
        values = {k: v * 1.0 for k, v in leaves.items()}
        loss = m.nn.functional.binary_cross_entropy(values["prob"], values["target01"], values["weight"])
        with m.no_grad():
            values[{"input": "prob", "target": "target01", "weight": "weight"}[written]].mul_(0.5)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
