"""Module's state_dict and load_state_dict hooks against torch 2.13: the same code run on a torch model and on
ours records the same calls (module, prefix, keep_vars, metadata, strict, key lists), produces the same state
dicts and metadata, and raises the same errors; ``parametrizations.weight_norm`` loads a checkpoint of the
hook-based ``weight_norm`` as torch's.  Cases follow torch's test/nn/test_module_hooks.py."""
import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn as nn

torch = pytest.importorskip("torch")


def _fixed(m, model):
    """``model`` with its parameters set to the same values in torch and daskgrad."""
    with m.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(m.tensor(np.cos(np.arange(p.numel()) + i).reshape(tuple(p.shape))))
    return model


def _model(m):
    return _fixed(m, m.nn.Sequential(m.nn.Linear(3, 4), m.nn.BatchNorm1d(4),
                                     m.nn.Sequential(m.nn.Linear(4, 2))).double())


def _plain(obj):
    """Records comparable across the libraries: tensors as arrays, modules as their class names."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(o) for o in obj) if not hasattr(obj, "_fields") else tuple(_plain(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (torch.nn.Module, nn.Module)):
        return type(obj).__name__
    if isinstance(obj, torch.Tensor):
        return obj.detach().numpy().tolist()
    if isinstance(obj, dg.Tensor):
        return obj.detach().numpy().tolist()
    return obj


def _same(run):
    """``run(lib)`` on torch and on daskgrad: equal records (or the same exception type and text)."""
    results = []
    for m in (torch, dg):
        try:
            results.append(("ok", _plain(run(m))))
        except Exception as e:
            results.append((type(e).__name__, str(e)))
    assert results[1] == results[0]
    return results[0]


def test_state_dict_pre_and_post_hooks_are_called_as_torchs():
    def run(m):
        model, calls = _model(m), []
        for name, sub in model.named_modules():
            sub.register_state_dict_pre_hook(lambda mod, prefix, keep_vars, name=name:
                                             calls.append(("pre", name, prefix, keep_vars)))
            sub.register_state_dict_post_hook(lambda mod, sd, prefix, meta, name=name:
                                              calls.append(("post", name, prefix, dict(meta), list(sd))))
        sd = model.state_dict(keep_vars=True)
        return calls, list(sd), dict(sd._metadata)
    assert _same(run)[0] == "ok"


def test_state_dict_post_hook_edits_in_place_and_may_not_return():
    def edit(m):
        model = _model(m)
        model[0].register_state_dict_post_hook(lambda mod, sd, prefix, meta: [sd.pop(prefix + "bias")] and None)
        return list(model.state_dict())

    def returns(m):
        model = _model(m)
        model.register_state_dict_post_hook(lambda mod, sd, prefix, meta: sd)
        return model.state_dict()

    def private_replaces(m):
        model = _model(m)
        handle = model[2]._register_state_dict_hook(lambda mod, sd, prefix, meta: {"only": 1})
        first = model[2].state_dict()
        handle.remove()
        return first, list(model[2].state_dict())
    assert _same(edit)[0] == "ok"
    assert _same(returns)[0] == "RuntimeError"
    assert _same(private_replaces)[1] == ({"only": 1}, ["0.weight", "0.bias"])


def test_load_state_dict_pre_hooks_see_torchs_arguments_and_may_rename_keys():
    def run(m):
        source, model, calls = _model(m), _model(m), []
        with m.no_grad():
            for p in source.parameters():
                p.add_(1.0)

        def public(mod, sd, prefix, meta, strict, missing, unexpected, errors):
            calls.append(("public", type(mod).__name__, prefix, dict(meta), strict, list(missing), list(unexpected),
                          list(errors), sorted(sd)))
            if prefix + "old_weight" in sd:
                sd[prefix + "weight"] = sd.pop(prefix + "old_weight")

        def private(sd, prefix, meta, strict, missing, unexpected, errors):
            calls.append(("private", prefix, sorted(sd)))
        for sub in model.modules():
            sub.register_load_state_dict_pre_hook(public)
            sub._register_load_state_dict_pre_hook(private)
        sd = source.state_dict()
        sd["2.0.old_weight"] = sd.pop("2.0.weight")
        result = model.load_state_dict(sd)
        return calls, result, model.state_dict()
    assert _same(run)[0] == "ok"


def test_load_state_dict_post_hooks_see_the_loaded_values_and_decide_a_strict_load():
    def run(m, clear):
        model, calls = _model(m), []

        def hook(mod, keys):
            calls.append((type(mod).__name__, list(keys.missing_keys), list(keys.unexpected_keys),
                          [p.detach().sum().item() for p in mod.parameters(recurse=False)]))
            if clear:
                keys.missing_keys.clear()
                keys.unexpected_keys.clear()
        for sub in model.modules():
            sub.register_load_state_dict_post_hook(hook)
        sd = {k: v + 1 for k, v in _model(m).state_dict().items() if k != "0.bias"}
        sd["extra"] = sd["0.weight"]
        result = model.load_state_dict(sd)
        return calls, result, model.state_dict()
    assert _same(lambda m: run(m, clear=False))[0] == "RuntimeError"
    outcome = _same(lambda m: run(m, clear=True))
    assert outcome[0] == "ok" and outcome[1][1] == ([], [])


def test_load_state_dict_post_hook_may_not_return_and_handles_remove_hooks():
    def returns(m):
        model = _model(m)
        model.register_load_state_dict_post_hook(lambda mod, keys: keys)
        return model.load_state_dict(model.state_dict())

    def removed(m):
        model, calls = _model(m), []
        handles = [model.register_load_state_dict_pre_hook(lambda *a: calls.append("pre")),
                   model.register_load_state_dict_post_hook(lambda *a: calls.append("post")),
                   model.register_state_dict_pre_hook(lambda *a: calls.append("sd pre")),
                   model.register_state_dict_post_hook(lambda *a: calls.append("sd post"))]
        model.load_state_dict(model.state_dict())
        for h in handles:
            h.remove()
        model.load_state_dict(model.state_dict())
        return calls
    assert _same(returns)[0] == "AssertionError"
    assert _same(removed)[1] == ["sd pre", "sd post", "pre", "post"]


def test_a_failed_load_copies_nothing_without_post_hooks():
    """daskgrad's all-or-nothing load (torch copies what fits before it raises)."""
    model = _model(dg)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    sd = {k: v + 1 for k, v in model.state_dict().items()}
    sd["2.0.weight"] = dg.zeros(5, 5, dtype="float64")
    with pytest.raises(RuntimeError, match="size mismatch for 2.0.weight"):
        model.load_state_dict(sd)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_a_one_element_vector_loads_into_a_scalar_as_torchs():
    def run(m):
        mod = m.nn.Module()
        mod.register_buffer("step", m.tensor(0.0, dtype=m.float64))
        mod.load_state_dict({"step": m.tensor([3.0], dtype=m.float64)})
        return mod.step
    assert _same(run) == ("ok", 3.0)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_parametrized_weight_norm_loads_a_hook_based_checkpoint_as_torchs(dim):
    import warnings
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4))

    outputs = {}

    def run(m):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            old = m.nn.utils.weight_norm(_fixed(m, m.nn.Linear(4, 3).double()), dim=dim)
        with m.no_grad():
            old.weight_v.mul_(2.0)
            old.weight_g.add_(0.5)
        new = m.nn.utils.parametrizations.weight_norm(m.nn.Linear(4, 3).double(), dim=dim)
        keys = new.load_state_dict(old.state_dict())
        outputs[m.__name__] = new(m.tensor(x)).detach().numpy()
        return keys, list(new.state_dict())
    assert _same(run)[0] == "ok"
    np.testing.assert_allclose(outputs["daskgrad"], outputs["torch"], rtol=1e-12)

    t = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 3).double(), dim=dim)
    d = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3).double(), dim=dim)
    ckpt = {"weight_g": t.parametrizations.weight.original0 + 1, "weight_v": t.parametrizations.weight.original1,
            "bias": t.bias}
    t.load_state_dict(ckpt)
    d.load_state_dict(ckpt)  # torch tensors load too
    np.testing.assert_allclose(d.weight.detach().numpy(), t.weight.detach().numpy(), rtol=1e-12)
