"""State dicts, module walks and size checks against torch (issue 16): tied weights and shared modules
under every name, loads that change nothing when they fail, torch's errors for bad indices and sizes."""
import copy

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn, optim


def _raised(fn):
    with pytest.raises(Exception) as err:
        fn()
    return type(err.value), str(err.value)


def _gpt(m, **kw):
    """GPT-2's weight tying: the output head reuses the embedding matrix."""
    class GPT(m.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.ln = m.Embedding(5, 3, **kw), m.LayerNorm(3, **kw)
            self.head = m.Linear(3, 5, bias=False, **kw)
            self.head.weight = self.emb.weight

        def forward(self, idx):
            return self.head(self.ln(self.emb(idx)))

    return GPT()


def test_tied_weights_state_dict_and_load_keep_the_tie_as_torch():
    torch = pytest.importorskip("torch")
    model, tmodel = _gpt(nn, dtype="float64"), _gpt(torch.nn).double()
    sd = model.state_dict()
    assert list(sd) == list(tmodel.state_dict()) == ["emb.weight", "ln.weight", "ln.bias", "head.weight"]
    assert sd["head.weight"]._storage is sd["emb.weight"]._storage
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]

    result = model.load_state_dict(tmodel.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert model.head.weight is model.emb.weight
    np.testing.assert_array_equal(model.head.weight.detach().numpy(), tmodel.emb.weight.detach().numpy())

    idx = np.array([[0, 4, 2], [1, 1, 3]])
    opt, topt = optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(tmodel.parameters(), lr=0.1)
    model(dg.from_array(idx, chunks=(1, 3))).sum().backward()
    tmodel(torch.tensor(idx)).sum().backward()
    opt.step()
    topt.step()
    after = model.state_dict()
    for k, v in tmodel.state_dict().items():
        np.testing.assert_allclose(after[k].numpy(), v.numpy(), rtol=1e-12, err_msg=k)

    fresh = _gpt(nn, dtype="float64")
    fresh.load_state_dict(after)  # our own dict, strictly
    assert fresh.head.weight is fresh.emb.weight
    np.testing.assert_array_equal(fresh.emb.weight.detach().numpy(), after["emb.weight"].numpy())


def test_load_without_the_tied_name_reports_it_missing_as_torch():
    torch = pytest.importorskip("torch")
    model, tmodel = _gpt(nn), _gpt(torch.nn)
    sd = {k: v for k, v in tmodel.state_dict().items() if k != "head.weight"}
    assert _raised(lambda: model.load_state_dict(sd)) == _raised(lambda: tmodel.load_state_dict(sd))
    assert model.load_state_dict(sd, strict=False) == tuple(tmodel.load_state_dict(sd, strict=False))


def _shared(m, param):
    """A child module and a parameter, each registered under two names."""
    class Shared(m.Module):
        def __init__(self):
            super().__init__()
            self.w = m.Parameter(param)
            self.v = self.w
            self.a = m.Sequential(m.Linear(2, 2), m.ReLU())
            self.b = self.a
            self.c = m.Linear(2, 1)

    return Shared()


def _walks(model):
    names = lambda it: [n for n, _ in it]  # noqa: E731
    return {
        "children": names(model.named_children()),
        "modules": names(model.named_modules()),
        "modules_all": names(model.named_modules(remove_duplicate=False)),
        "modules_prefix": names(model.named_modules(prefix="m")),
        "n_modules": [len(list(model.modules())), len(list(model.modules(remove_duplicate=False)))],
        "params": names(model.named_parameters()),
        "params_all": names(model.named_parameters(remove_duplicate=False)),
        "params_local": names(model.named_parameters(recurse=False, remove_duplicate=False)),
        "params_prefix": names(model.named_parameters(prefix="pre")),
        "n_params": len(list(model.parameters())),
        "n_children": len(list(model.children())),
        "state_dict": list(model.state_dict()),
        "state_dict_prefix": list(model.state_dict(prefix="p.")),
    }


def test_shared_modules_and_parameters_walk_and_save_as_torch():
    torch = pytest.importorskip("torch")
    model, tmodel = _shared(nn, np.zeros(2, dtype=np.float32)), _shared(torch.nn, torch.zeros(2))
    assert _walks(model) == _walks(tmodel)
    lin = nn.Linear(2, 2)
    seq, tlin = nn.Sequential(lin, nn.ReLU(), lin), torch.nn.Linear(2, 2)
    tseq = torch.nn.Sequential(tlin, torch.nn.ReLU(), tlin)
    assert list(seq.state_dict()) == list(tseq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [n for n, _ in seq.named_children()] == [n for n, _ in tseq.named_children()] == ["0", "1"]
    seq.load_state_dict(tseq.state_dict())
    np.testing.assert_array_equal(seq[2].weight.detach().numpy(), tlin.weight.detach().numpy())


def test_load_state_dict_errors_have_torch_types_texts_and_key_order():
    torch = pytest.importorskip("torch")
    model, tmodel = _shared(nn, np.zeros(2, dtype=np.float32)), _shared(torch.nn, torch.zeros(2))
    extra = {"a.0.x": torch.zeros(1), "y": torch.zeros(1), "c.weight.z": torch.zeros(1), "a": torch.zeros(1)}
    sd = {**tmodel.state_dict(), **extra}
    assert _raised(lambda: model.load_state_dict(sd)) == _raised(lambda: tmodel.load_state_dict(sd))
    assert model.load_state_dict(sd, strict=False) == tuple(tmodel.load_state_dict(sd, strict=False))
    assert _raised(lambda: model.load_state_dict([1])) == _raised(lambda: tmodel.load_state_dict([1]))
    listed = {**tmodel.state_dict(), "c.weight": [[1.0, 2.0]]}
    assert _raised(lambda: model.load_state_dict(listed)) == _raised(lambda: tmodel.load_state_dict(listed))


def _values(model):
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_failed_module_load_changes_nothing():
    """torch copies every parameter that fits before it raises; daskgrad checks them all first."""
    torch = pytest.importorskip("torch")
    model = _gpt(nn)
    params, before = [id(p) for p in model.parameters()], _values(model)
    good = {k: torch.full(tuple(v.shape), 7.0) for k, v in before.items()}
    bad_shape = {**good, "head.weight": torch.zeros(5, 4)}
    not_a_tensor = {**good, "ln.bias": [0.0, 0.0, 0.0]}
    missing = {k: v for k, v in good.items() if k != "ln.bias"}
    for sd in (bad_shape, not_a_tensor, missing):
        tmodel = _gpt(torch.nn)
        expected = _raised(lambda: tmodel.load_state_dict(sd))
        assert _raised(lambda: model.load_state_dict(sd)) == expected
        assert (tmodel.ln.weight == 7).all()  # torch: loaded in part
        assert [id(p) for p in model.parameters()] == params and model.head.weight is model.emb.weight
        for k, v in _values(model).items():
            np.testing.assert_array_equal(v, before[k], err_msg=k)


def _adam_after_a_step():
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    opt = optim.Adam([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.01}])
    model(dg.ones(4, 3, chunks=2)).sum().backward()
    opt.step()
    return model, opt


def _opt_snapshot(opt):
    """Everything a load may change: the state's objects and values, the groups' settings and parameters."""
    state = {id(p): {k: (v, v.numpy().copy() if isinstance(v, dg.Tensor) else v) for k, v in s.items()}
             for p, s in opt._state_items()}
    groups = [({k: v for k, v in g.items() if k != "params"}, [id(p) for p in g["params"]]) for g in opt.param_groups]
    return state, copy.deepcopy(groups)


def _assert_unchanged(opt, snapshot):
    state, groups = snapshot
    now_state, now_groups = _opt_snapshot(opt)
    assert now_groups == groups
    assert {i: list(s) for i, s in now_state.items()} == {i: list(s) for i, s in state.items()}
    for i, s in state.items():
        for k, (obj, value) in s.items():
            assert now_state[i][k][0] is obj
            np.testing.assert_array_equal(now_state[i][k][1], value)


def _wrong_exp_avg(sd):
    sd["state"][1]["exp_avg"] = np.zeros(1, dtype=np.float32)  # a (1,) moment for a (2,) bias


def _wrong_group_size(sd):
    sd["param_groups"][1]["params"] = [2, 3, 4]


def _wrong_group_count(sd):
    del sd["param_groups"][1]


def _step_not_a_scalar(sd):
    sd["state"][3]["step"] = np.array([1.0, 2.0])


@pytest.mark.parametrize("spoil, error, text", [
    (_wrong_exp_avg, ValueError, "loaded state dict has exp_avg of shape [1] for a parameter of shape [2]"),
    (_wrong_group_size, ValueError, "loaded state dict contains a parameter group that doesn't match the size of "
                                    "optimizer's group"),
    (_wrong_group_count, ValueError, "loaded state dict has a different number of parameter groups"),
    (_step_not_a_scalar, ValueError, None),
], ids=["exp_avg_shape", "group_size", "group_count", "step_not_scalar"])
def test_failed_optimizer_load_changes_nothing(spoil, error, text):
    model, opt = _adam_after_a_step()
    sd = copy.deepcopy(opt.state_dict())
    for g in sd["param_groups"]:
        g["lr"] = 0.5  # a group update that must not land
    spoil(sd)
    snapshot = _opt_snapshot(opt)
    with pytest.raises(error) as err:
        opt.load_state_dict(sd)
    assert text is None or str(err.value) == text
    _assert_unchanged(opt, snapshot)
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 0.01]


def test_torch_loads_a_wrong_shaped_moment_and_fails_at_the_next_step():
    """Why daskgrad raises at load time: torch takes a wrong-shaped ``exp_avg`` silently and breaks the
    next ``step()``; daskgrad's ``copy_`` would broadcast a (1,) moment and train on with it."""
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([p])
    p.grad = torch.ones(2)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][0]["exp_avg"] = torch.zeros(1)
    opt.load_state_dict(sd)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        opt.step()


def test_sgd_momentum_buffer_of_the_wrong_shape_is_refused_at_load():
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(dg.ones(4, 3, chunks=2)).sum().backward()
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][0]["momentum_buffer"] = np.zeros((3, 2), dtype=np.float32)  # transposed
    snapshot = _opt_snapshot(opt)
    with pytest.raises(ValueError, match=r"momentum_buffer of shape \[3, 2\] for a parameter of shape \[2, 3\]"):
        opt.load_state_dict(sd)
    _assert_unchanged(opt, snapshot)


@pytest.mark.parametrize("bad", [-1, 5, 9, -6])
def test_embedding_index_out_of_range_raises_torch_index_error(bad):
    torch = pytest.importorskip("torch")
    emb, temb = nn.Embedding(5, 3), torch.nn.Embedding(5, 3)
    idx = np.array([[0, 1, 2], [3, bad, 4]])
    expected = _raised(lambda: temb(torch.tensor(idx)))
    assert expected == (IndexError, "index out of range in self")
    assert _raised(lambda: emb(idx)) == expected  # host indices: at the call, as torch
    lazy = dg.from_array(idx, chunks=(1, 2))  # lazy indices: from the task that reads them
    assert _raised(lambda: emb(lazy).detach().numpy()) == expected
    assert _raised(lambda: emb(lazy).sum().backward()) == expected  # the backward reads no forward rows
    assert emb.weight.grad is None
    assert _raised(lambda: nn.functional.embedding(lazy, emb.weight).detach().numpy()) == expected


@pytest.mark.parametrize("layer, args, kwargs", [
    ("Linear", (4, -1), {}), ("Linear", (-1, 4), {}), ("Linear", (-2, -3), {}), ("Linear", (4, -1), {"bias": False}),
    ("Embedding", (-1, 4), {}), ("Embedding", (4, -1), {}),
    ("LayerNorm", (-1,), {}), ("LayerNorm", ((2, -1),), {}), ("LayerNorm", (-1,), {"bias": False}),
])
def test_negative_layer_sizes_raise_as_torch(layer, args, kwargs):
    torch = pytest.importorskip("torch")
    expected = _raised(lambda: getattr(torch.nn, layer)(*args, **kwargs))
    assert expected[0] is RuntimeError
    assert _raised(lambda: getattr(nn, layer)(*args, **kwargs)) == expected


def test_layer_sizes_torch_accepts_are_accepted():
    assert nn.LayerNorm(-1, elementwise_affine=False).normalized_shape == (-1,)  # torch allocates nothing
    assert nn.Linear(4, 0).weight.shape == (0, 4) and nn.Embedding(0, 3).weight.shape == (0, 3)
