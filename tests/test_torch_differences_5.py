"""Differences from torch a review found (s64), each checked against torch on the same inputs: writes through
``.data`` (torch's own version counter: autograd does not see them, and a backward reads the values they wrote);
Module's backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``, the deprecated
``register_backward_hook``; cases ported from torch's test/nn/test_module_hooks.py) and a node's post hook's
returned gradients; Python attributes on a tensor (``x.scale = 2.0``); ``daskgrad.where(cond)`` (NumPy's
``nonzero``); the gradient of a complex ``sigmoid``; the node torch names when a result written in place through
a view was modified."""
import copy
import pickle
import re
import warnings
from functools import partial

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

A = np.arange(1.0, 7.0).reshape(2, 3) / 7


def _leaf(lib, values=A, requires_grad=True):
    if lib is torch:
        return torch.tensor(values, requires_grad=requires_grad)
    return dg.from_array(np.array(values), chunks=(1,) * np.ndim(values) if np.ndim(values) else (),
                         requires_grad=requires_grad)


def _np(t):
    return None if t is None else np.asarray(t.detach().numpy())


def _same(ours, theirs):
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
    elif theirs is None or isinstance(theirs, (int, str)):
        assert ours == theirs
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


# ----------------------------------------------------------------------------------------- writes through .data
def _data_case(lib, k):
    x = _leaf(lib)
    if k == "copy_ into a saved intermediate":
        w = x * 1
        y = (w * w).sum()
        w.data.copy_(w.data * 0 + 1)
        y.backward()
        return _np(x.grad), w._version
    if k == "mul_ of a leaf between two backwards":
        y = x.sin().sum()
        y.backward(retain_graph=True)
        x.data.mul_(2)
        y.backward()
        return _np(x.grad), x._version
    if k == "a row assigned":
        y = (x * x).sum()
        x.data[0] = 5
        y.backward()
        return _np(x.grad), x._version
    if k == "a saved result":
        e = x.exp()
        e.data.mul_(2)
        e.sum().backward()
        return _np(x.grad), e._version
    if k == "the base of a saved view":
        w = x * 1
        v = w[0]
        y = (v * v).sum()
        w.data.mul_(3)
        y.backward()
        return _np(x.grad), v._version
    if k == "each .data its own counter":
        d = x.data
        d.mul_(2)
        return d._version, x._version, x.data._version, _np(x)
    if k == "a tensor saved from .data, then written otherwise":
        p = _leaf(lib)
        y = (x.data * p).sum()
        with lib.no_grad():
            x.mul_(2)
        y.backward()
        return _np(p.grad), x._version
    if k == "a view of .data written":
        w = x * 1
        y = (w * w).sum()
        w.data[1].mul_(2)
        y.backward()
        return _np(x.grad), w._version
    if k == "a detached .data written":
        w = x * 1
        y = (w * w).sum()
        d = w.data
        d.detach().mul_(5)
        y.backward()
        return _np(x.grad), d._version, w._version
    if k == "forward after fill_":
        x.data.fill_(2.0)
        return _np(x * 3), x._version
    raise KeyError(k)


DATA_CASES = ["copy_ into a saved intermediate", "mul_ of a leaf between two backwards", "a row assigned",
              "a saved result", "the base of a saved view", "each .data its own counter",
              "a tensor saved from .data, then written otherwise", "a view of .data written",
              "a detached .data written", "forward after fill_"]


@pytest.mark.parametrize("case", DATA_CASES)
def test_a_write_through_data_is_seen_by_the_values_not_by_autograd_as_torchs(case):
    _same(_data_case(dg, case), _data_case(torch, case))


def _error(fn):
    with pytest.raises(RuntimeError) as info:
        fn()
    return str(info.value)


def test_an_inplace_write_after_a_data_write_still_raises_with_torchs_version_numbers():
    def body(lib):
        x = _leaf(lib)
        w = x * 1
        y = (w * w).sum()
        w.data.mul_(2)
        w.mul_(2)
        return _error(y.backward)
    ours, theirs = body(dg), body(torch)
    assert ours == theirs.replace("torch.", "daskgrad.")
    assert "is at version 1; expected version 0 instead" in ours


# ----------------------------------------------------------------------------------------------- backward hooks
def _linear(lib):
    lin = lib.nn.Linear(3, 3).to(lib.float64)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(np.arange(9.0).reshape(3, 3) / 10))
        lin.bias.copy_(lib.tensor(np.array([0.5, -1.0, 2.0])))
    return lin


def _hooked(lib, case):
    log = []
    lin = _linear(lib)
    x = _leaf(lib, np.random.default_rng(0).standard_normal((4, 3)))
    if case == "full hook scales grad_input":
        lin.register_full_backward_hook(lambda m, gi, go: (gi[0] * 3,))
    elif case == "pre hook scales grad_output":
        lin.register_full_backward_pre_hook(lambda m, go: (go[0] * 2,))
        lin.register_full_backward_hook(lambda m, gi, go: log.append((_np(gi[0]), _np(go[0]))))
    elif case == "removed":
        lin.register_full_backward_hook(lambda m, gi, go: (gi[0] * 3,)).remove()
        lin.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,)).remove()
    elif case == "input does not require grad":
        x = x.detach()
        lin.register_full_backward_hook(lambda m, gi, go: log.append((gi, _np(go[0]))))
    elif case == "hook sees the module":
        lin.register_full_backward_hook(lambda m, gi, go: log.append(m is lin))
        lin.register_full_backward_pre_hook(lambda m, go: log.append(m is lin))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = lin(x)
        (y * y).sum().backward()
    return _np(x.grad) if x.grad is not None else None, _np(lin.weight.grad), _np(lin.bias.grad), log


@pytest.mark.parametrize("case", ["full hook scales grad_input", "pre hook scales grad_output", "removed",
                                  "input does not require grad", "hook sees the module"])
def test_module_backward_hooks_change_and_see_the_gradients_as_torchs(case):
    _same(_hooked(dg, case), _hooked(torch, case))


class _Net:
    """torch's test_module_hooks.py ToyModel, for either library."""

    @staticmethod
    def make(lib):
        nn = lib.nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.seq1 = nn.Sequential(*[nn.Linear(10, 10) for _ in range(2)])
                self.seq2 = nn.Sequential(*[nn.Linear(10, 10) for _ in range(2)])

            def forward(self, x):
                return self.seq2(self.seq1(x))

        class ToyModel(nn.Module):
            def __init__(self):
                super().__init__()
                self.net1 = Net()
                self.net2 = Net()

            def forward(self, x):
                return self.net2(self.net1(x))

        return ToyModel()


def _input(lib, shape=(10, 10), requires_grad=False):
    v = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return torch.tensor(v, requires_grad=requires_grad) if lib is torch else dg.from_array(
        v, chunks=(5,) + shape[1:], requires_grad=requires_grad)


def _full_backward_hook(fired, expected_module, hook_id, module, grad_input, grad_output):
    fired.append(hook_id)
    assert module is expected_module
    assert len(grad_input) == 1 and len(grad_output) == 1


def _full_backward_pre_hook(fired, expected_module, hook_id, module, grad_output):
    fired.append(hook_id)
    assert module is expected_module
    assert len(grad_output) == 1


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_full_backward_hooks_fire_in_torchs_order_with_prepend(lib):
    """test_module_hooks.py: test_full_backward_hooks."""
    fired = []
    model = _Net.make(lib)
    x = _input(lib)
    hook = partial(_full_backward_hook, fired, model.net1)
    model.net1.register_full_backward_hook(partial(hook, 0))
    model.net1.register_full_backward_hook(partial(hook, 1))
    model.net1.register_full_backward_hook(partial(hook, 2))
    model.net1.register_full_backward_hook(partial(hook, 3), prepend=True)
    model.net1.register_full_backward_hook(partial(hook, 4), prepend=True)
    expected = [4, 3, 0, 1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (no input requires grad: torch's warning)
        out = model(x)
        assert fired == []
        out.sum().backward()
        assert fired == expected
        model(x).sum().backward()
    assert fired == expected + expected


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_full_backward_pre_hooks_fire_in_torchs_order_and_replace_grad_output(lib):
    """test_module_hooks.py: test_full_backward_pre_hooks."""
    fired = []
    model = _Net.make(lib)
    x = _input(lib)
    hook = partial(_full_backward_pre_hook, fired, model.net1)
    model.net1.register_full_backward_pre_hook(partial(hook, 0), prepend=True)
    model.net1.register_full_backward_pre_hook(partial(hook, 1), prepend=True)
    model.net1.register_full_backward_pre_hook(partial(hook, 2))
    model.net1.register_full_backward_pre_hook(partial(hook, 3))
    model.net1.register_full_backward_pre_hook(partial(hook, 4))
    expected = [1, 0, 2, 3, 4]
    out = model(x)
    assert fired == []
    out.sum().backward()
    assert fired == expected
    model(x).sum().backward()
    assert fired == expected + expected
    a = _input(lib, (2,), requires_grad=True)
    lin = lib.nn.Linear(2, 2)
    lin.register_full_backward_pre_hook(lambda _, grad_output: (grad_output[0] * 0,))
    lin(a).sum().backward()
    np.testing.assert_array_equal(_np(a.grad), np.zeros(2, np.float32))


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_forward_and_backward_hooks_mixed_fire_in_torchs_order(lib):
    """test_module_hooks.py: test_mixed_hooks."""
    fired = []
    model = _Net.make(lib)
    x = _input(lib)
    model.register_forward_pre_hook(lambda m, inp: fired.append(0))
    model.register_forward_hook(lambda m, inp, out: fired.append(1))
    model.register_full_backward_pre_hook(partial(_full_backward_pre_hook, fired, model, 2))
    model.register_full_backward_hook(partial(_full_backward_hook, fired, model, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model(x)
        assert fired == [0, 1]
        out.sum().backward()
        assert fired == [0, 1, 2, 3]
        model(x).sum().backward()
    assert fired == [0, 1, 2, 3, 0, 1, 2, 3]


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_a_module_returning_a_dict_warns_and_its_backward_hooks_do_not_fire(lib):
    """test_module_hooks.py: test_bw_hook_warning_for_non_tensor_or_tuple."""
    counter = {"forward": 0, "backward": 0}

    class TestModule(lib.nn.Module):
        def forward(self, d):
            return {"x": lib.nn.functional.softmax(d["x"], dim=0)}

    x = _input(lib, (2,), requires_grad=True)
    model = TestModule()
    model.register_forward_pre_hook(lambda m, i: counter.__setitem__("forward", counter["forward"] + 1))
    model.register_forward_hook(lambda m, i, o: counter.__setitem__("forward", counter["forward"] + 1))
    model.register_full_backward_pre_hook(lambda m, go: counter.__setitem__("backward", counter["backward"] + 1))
    model.register_full_backward_hook(lambda m, gi, go: counter.__setitem__("backward", counter["backward"] + 1))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model({"x": x})["x"].sum().backward()
    assert counter == {"forward": 2, "backward": 0}
    assert len(w) == 1 and "should be a Tensor or a tuple of Tensors" in str(w[0].message)


@pytest.mark.parametrize("register", ["register_backward_hook", "register_full_backward_hook",
                                      "register_full_backward_pre_hook"])
@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_backward_hooks_count_as_torchs_through_retained_graphs_and_removal(lib, register):
    """test_module_hooks.py: TestModuleHookNN._test_hooks."""
    module = lib.nn.Sigmoid()
    inp = _input(lib, (5, 5), requires_grad=True)
    counter = {"forwards": 0, "backwards": 0}
    twos = np.full((5, 5), 2.0, np.float32)

    def fw_hook(inc, h_module, args, output):
        assert isinstance(args, tuple) and h_module is module
        counter["forwards"] += inc

    def bw_hook(inc, h_module, grad_input, grad_output):
        assert isinstance(grad_input, tuple) and isinstance(grad_output, tuple) and h_module is module
        np.testing.assert_array_equal(_np(grad_output[0]), twos)
        counter["backwards"] += inc

    def bw_pre_hook(inc, h_module, grad_output):
        assert isinstance(grad_output, tuple) and h_module is module
        np.testing.assert_array_equal(_np(grad_output[0]), twos)
        counter["backwards"] += inc

    def seed():
        return torch.tensor(twos) if lib is torch else dg.from_array(twos, chunks=(5, 5))

    hook_fn = bw_pre_hook if register == "register_full_backward_pre_hook" else bw_hook
    test_fwd = module.register_forward_hook(lambda *args: fw_hook(1, *args))
    module(inp)
    module(inp)
    assert counter == {"forwards": 2, "backwards": 0}
    test_bwd = getattr(module, register)(lambda *args: hook_fn(1, *args))
    output = module(inp)
    assert counter == {"forwards": 3, "backwards": 0}
    output.backward(seed(), retain_graph=True)
    assert counter == {"forwards": 3, "backwards": 1}
    output.backward(seed(), retain_graph=True)
    assert counter == {"forwards": 3, "backwards": 2}
    test2_fwd = module.register_forward_hook(lambda *args: fw_hook(2, *args))
    module(inp)
    assert counter == {"forwards": 6, "backwards": 2}
    test2_bwd = getattr(module, register)(lambda *args: hook_fn(2, *args))
    module(inp).backward(seed())
    assert counter == {"forwards": 9, "backwards": 5}
    test2_bwd.remove()
    module(inp).backward(seed())
    assert counter == {"forwards": 12, "backwards": 6}
    test2_fwd.remove()
    module(inp).backward(seed())
    assert counter == {"forwards": 13, "backwards": 7}
    test_fwd.remove()
    test_bwd.remove()


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_the_full_backward_hook_sees_the_grad_output_the_pre_hook_returned(lib):
    """test_module_hooks.py: test_backward_hooks_interaction."""
    module = lib.nn.Sigmoid()
    cnt = [0]

    def bw_pre_hook(m, grad_output):
        cnt[0] += 1
        return (grad_output[0] * 0.5,)

    def bw_hook(m, grad_in, grad_output):
        np.testing.assert_array_equal(_np(grad_output[0]), np.full((1, 2), 0.5, np.float32))
        cnt[0] += 1
        return grad_output

    module.register_full_backward_pre_hook(bw_pre_hook)
    module.register_full_backward_hook(bw_hook)
    t = _input(lib, (1, 2), requires_grad=True)
    module(t).sum().backward()
    assert cnt[0] == 2


def _invalid_output_errors(lib):
    module = lib.nn.Sigmoid()
    inp = _input(lib, (5, 5), requires_grad=True)
    other = _input(lib, (2, 2))
    out = []

    def bw_fail1(m, grad_input, grad_output):
        return grad_input[:-1]

    def bw_fail2(m, grad_input, grad_output):
        return grad_input + (other,)

    def bw_pre_fail1(m, grad_output):
        return ()

    def bw_pre_fail2(m, grad_output):
        return grad_output + (other,)

    for register, fn in (("register_backward_hook", bw_fail1), ("register_backward_hook", bw_fail2),
                         ("register_full_backward_pre_hook", bw_pre_fail1),
                         ("register_full_backward_pre_hook", bw_pre_fail2)):
        with getattr(module, register)(fn):
            out.append(_error(lambda: module(inp).sum().backward()))
    return out


def test_hooks_returning_the_wrong_number_of_gradients_raise_torchs_errors():
    """test_module_hooks.py: test_hook_invalid_outputs."""
    ours = _invalid_output_errors(dg)
    assert ours == _invalid_output_errors(torch)
    assert "got 0, but expected 1" in ours[0] and "got 2, but expected 1" in ours[3]


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_forward_sees_which_inputs_require_grad_under_a_backward_hook(lib):
    """test_module_hooks.py: test_hook_requires_grad."""
    seen = []

    class MyModule(lib.nn.Module):
        def forward(self, arg1, arg2, arg3):
            seen.append((arg1.requires_grad, arg2.requires_grad, arg3.requires_grad))
            return arg1.sum() + arg2.sum() + arg3.sum()

    inp = _input(lib, (2,), requires_grad=True)
    mod = MyModule()
    mod(inp, inp.detach(), inp)
    mod.register_full_backward_hook(lambda mod, gi, go: None)
    mod(inp, inp.detach(), inp)
    assert seen == [(True, False, True)] * 2


def _no_requires_grad(lib):
    mod = lib.nn.Linear(2, 3)
    inp = _input(lib, (1, 2))
    state = {"return": "None", "called": 0}

    def hook(m, grad_input, grad_output):
        state["called"] += 1
        assert all(g is None for g in grad_input)
        assert [tuple(g.shape) for g in grad_output] == [(1, 3)]
        return {"grad_input": grad_input, "invalid": inp, "None": None}[state["return"]]

    mod.register_full_backward_hook(hook)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        mod(inp).sum().backward()
        state["return"] = "grad_input"
        mod(inp).sum().backward()
    state["return"] = "invalid"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        error = _error(lambda: mod(inp).sum().backward())
    return state["called"], [str(x.message) for x in w], error


def test_without_an_input_requiring_grad_the_full_hook_fires_at_the_outputs_as_torchs():
    """test_module_hooks.py: test_hook_no_requires_grad."""
    ours = _no_requires_grad(dg)
    assert ours[:2] == _no_requires_grad(torch)[:2]
    assert ours[2] == _no_requires_grad(torch)[2]
    assert ours[0] == 3 and "where no input requires gradient" in ours[2]


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_non_tensor_arguments_and_results_are_none_in_what_the_hook_sees(lib):
    """test_module_hooks.py: test_hook_extra_input and test_hook_last_arg_requires_grad."""
    seen = []

    class MyModule(lib.nn.Module):
        def forward(self, non_tensor, tensor):
            return tensor.clone(), non_tensor

    inp = _input(lib, (2,), requires_grad=True)
    mod = MyModule()
    mod.register_full_backward_hook(lambda m, gi, go: seen.append(
        (gi[0] is None, isinstance(gi[1], type(inp)), isinstance(go[0], type(inp)), go[1] is None)))
    out, _ = mod(True, inp)
    out.sum().backward()
    assert seen == [(True, True, True, True)]
    loss = lib.nn.L1Loss()
    loss.register_full_backward_hook(lambda m, gI, gO: None)
    loss(inp.detach(), inp)


def _non_full_warnings(lib):
    a = _input(lib, (2,), requires_grad=True)
    b = _input(lib, (2,), requires_grad=True) * 1

    class ListInput(lib.nn.Module):
        def forward(self, pair):
            return pair[0].clone(), pair[1].clone()

    class ListOutput(lib.nn.Module):
        def forward(self, a, b):
            return [a.clone(), b.clone()]

    class TwoNodes(lib.nn.Module):
        def forward(self, a, b):
            return a.clone(), b.clone()

    class Chain(lib.nn.Module):
        def forward(self, a):
            return a.clone().clone()

    out = []
    for module, args in ((ListInput(), ([a, b],)), (ListOutput(), (a, b)), (TwoNodes(), (a, b)), (Chain(), (a,))):
        module.register_backward_hook(lambda *args: None)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            module(*args)
        out.append([(type(x.message).__name__, str(x.message)) for x in w])
    return out


def test_the_deprecated_backward_hook_warns_as_torchs_where_it_would_miss_gradients():
    """test_module_hooks.py: test_hook_non_full_warning."""
    ours = _non_full_warnings(dg)
    assert ours == _non_full_warnings(torch)
    assert all(len(w) == 1 for w in ours)


@pytest.mark.parametrize("lib", [torch, dg], ids=["torch", "daskgrad"])
def test_full_backward_hook_gradients_have_the_inputs_and_outputs_sizes(lib):
    """test_module_hooks.py: test_hook_backward_size."""
    class MyModule(lib.nn.Module):
        def forward(self, arg1, arg2):
            tmp = arg1.sum() * arg2
            tmp = tmp + arg2.sum() * arg1.sum()
            tmp = tmp.sum().view(1)
            return tmp.expand(8).contiguous()

    seen = []
    module = MyModule()
    with module.register_full_backward_hook(lambda m, gi, go: seen.append(
            ([tuple(g.shape) for g in gi], [tuple(g.shape) for g in go]))):
        module(_input(lib, (5, 5), True), _input(lib, (10, 10), True)).sum().backward()
    assert seen == [([(5, 5), (10, 10)], [(8,)])]


def _writeable(lib, register, with_forward_hooks=False):
    module = lib.nn.Sigmoid()
    inp = _input(lib, (5, 5), requires_grad=True)
    if with_forward_hooks:
        module.register_forward_pre_hook(lambda m, i: lib.nn.functional.relu(i[0]))
        module.register_forward_hook(lambda m, i, o: -o)
    else:
        getattr(module, register)(lambda m, gi, go: tuple(g * 2 for g in gi))
    out = module(inp)
    out.backward(out.detach() * 0 + 2 if with_forward_hooks else out.detach() * 0 + 1, retain_graph=True)
    return _np(out), _np(inp.grad)


@pytest.mark.parametrize("register,forward_hooks", [("register_backward_hook", False),
                                                    ("register_full_backward_hook", False), (None, True)])
def test_hooks_returning_new_values_change_the_gradient_as_torchs(register, forward_hooks):
    """test_module_hooks.py: test_hook_backward_writeable and test_hook_forward_preforward_writable."""
    ours, theirs = _writeable(dg, register, forward_hooks), _writeable(torch, register, forward_hooks)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("first,second", [("register_backward_hook", "register_full_backward_hook"),
                                          ("register_full_backward_hook", "register_backward_hook")])
def test_regular_and_full_backward_hooks_on_one_module_raise_torchs_error(first, second):
    def body(lib):
        m = lib.nn.Sigmoid()
        getattr(m, first)(lambda *a: None)
        return _error(lambda: getattr(m, second)(lambda *a: None))
    assert body(dg) == body(torch)


def _node_hook(lib, ret):
    x, w = _leaf(lib, [1.0, 2.0]), _leaf(lib, [3.0, 4.0])
    y = x * w
    y.grad_fn.register_hook(lambda gi, go: ret(gi))
    try:
        y.sum().backward()
    except (RuntimeError, TypeError) as e:
        return type(e).__name__, str(e)
    return _np(x.grad), None if w.grad is None else _np(w.grad)


@pytest.mark.parametrize("ret", [lambda gi: (gi[0] * 2, None), lambda gi: (gi[0] * 2,), lambda gi: [gi[0], gi[1]],
                                 lambda gi: (gi[0][:1], gi[1]), lambda gi: None],
                         ids=["replaces", "too few", "a list", "resized", "None"])
def test_a_nodes_post_hook_replaces_its_gradients_as_torchs(ret):
    ours, theirs = _node_hook(dg, ret), _node_hook(torch, ret)
    if isinstance(theirs[0], str):
        assert ours == theirs
    else:
        _same(ours, theirs)


# ------------------------------------------------------------------------------------------- tensor attributes
def test_a_tensor_takes_python_attributes_that_ops_and_detach_do_not_carry():
    for lib in (torch, dg):
        x = _leaf(lib)
        x.scale = 2.0
        assert x.scale == 2.0 and x.__dict__ == {"scale": 2.0}
        for made in (x * 1, x.detach(), x.data, x[0], x.clone(), x.T):
            assert not hasattr(made, "scale")


def test_deepcopy_and_pickle_keep_a_tensors_attributes_not_a_parameters_grad():
    for lib in (torch, dg):
        x = _leaf(lib)
        x.scale = 2.0
        assert copy.deepcopy(x).scale == 2.0
        assert pickle.loads(pickle.dumps(x)).scale == 2.0
        p = lib.nn.Parameter(_leaf(lib, requires_grad=False))
        p.grad = _leaf(lib, requires_grad=False)
        p.note = "w"
        q = copy.deepcopy(p)
        assert type(q) is type(p) and q.grad is None and q.__dict__ == {} and q.requires_grad
        np.testing.assert_array_equal(_np(q), A)
        assert pickle.loads(pickle.dumps(p)).note == "w"


def test_torchs_read_only_attributes_still_refuse():
    x = dg.from_array(A, chunks=1)
    with pytest.raises(AttributeError):
        x.shape = (1,)
    with pytest.raises(AttributeError):
        x.dtype = np.float32


def test_a_compiled_function_reading_a_tensors_attribute_retraces_when_it_changes():
    x = dg.from_array(A, chunks=1)
    held = dg.from_array(A, chunks=1)

    def f(t):
        return t * t.scale + held.s

    compiled = dg.compile(f)
    for scale, s in ((1.0, 0.0), (2.0, 0.0), (2.0, 0.0), (3.0, 5.0)):
        x.scale, held.s = scale, s
        np.testing.assert_array_equal(compiled(x).numpy(), A * scale + s)
    assert compiled.cache_info()["replays"] == 1


# -------------------------------------------------------------------------------------------- where, one argument
def test_where_of_a_condition_alone_is_numpys_nonzero():
    c = np.array([[True, False, True], [False, False, True]])
    got = dg.where(dg.from_array(c, chunks=1))
    want = np.where(c)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)
    np.testing.assert_array_equal(dg.where(dg.from_array(np.array([0.0, 2.0, 1.0]), chunks=2))[0].numpy(), [1, 2])


@pytest.mark.parametrize("args", [(1,), (None,)], ids=["a number", "None"])
def test_where_with_one_of_x_and_y_raises_numpys_error(args):
    c = np.array([True, False])
    with pytest.raises(ValueError) as theirs:
        np.where(c, *args)
    with pytest.raises(ValueError, match="^" + re.escape(str(theirs.value)) + "$"):
        dg.where(dg.from_array(c), *args)


def test_where_of_a_0d_condition_alone_raises_numpys_error():
    with pytest.raises(ValueError) as theirs:
        np.where(np.array(3.0))
    with pytest.raises(ValueError, match="^" + re.escape(str(theirs.value)) + "$"):
        dg.where(dg.tensor(3.0))


# ------------------------------------------------------------------------------------------------ complex sigmoid
Z = (np.random.default_rng(31).standard_normal((3, 4)) + 1j * np.random.default_rng(32).standard_normal((3, 4)))
LOSSES = {
    "real plus imag": lambda z: z.sigmoid().real.sum() + z.sigmoid().imag.sum(),
    "abs": lambda z: z.sigmoid().abs().sum(),
    "times z, imag": lambda z: (z.sigmoid() * z).imag.sum(),
    "in place": lambda z: (z * 1).sigmoid_().real.sum(),
}


@pytest.mark.parametrize("loss", LOSSES, ids=list(LOSSES))
def test_the_gradient_of_a_complex_sigmoid_is_torchs(loss):
    ours, theirs = _leaf(dg, Z), _leaf(torch, Z)
    LOSSES[loss](ours).backward()
    LOSSES[loss](theirs).backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_the_second_derivative_of_a_complex_sigmoid_is_torchs():
    grads = []
    for lib in (dg, torch):
        z = _leaf(lib, Z)
        (g,) = lib.autograd.grad(z.sigmoid().real.sum(), z, create_graph=True)
        g.abs().sum().backward()
        grads.append((_np(g), _np(z.grad)))
    _same(grads[0], grads[1])


# ---------------------------------------------------------------------------------- the node an error names
def _view_written(lib, keep):
    x = _leaf(lib, np.random.default_rng(2).standard_normal((4, 6)))
    y = x.clone()
    v = y.select(0, 2)
    v.sigmoid_()
    y[1:3, 1:5].tanh_()
    if not keep:
        del v
    return _error(lambda: y.sum().backward())


@pytest.mark.parametrize("keep", [True, False], ids=["the view lives", "the view is gone"])
def test_a_result_written_through_a_view_then_modified_names_torchs_node(keep):
    """torch keeps the view's node weakly: AsStrided while the view lives, the node that saved it after."""
    ours, theirs = _view_written(dg, keep), _view_written(torch, keep)
    assert ours == theirs.replace("torch.", "daskgrad.")
    assert ("AsStrided" if keep else "Sigmoid") in ours


def _complex_hooked(lib):
    class Twice(lib.nn.Module):
        def forward(self, z):
            return z * 2

    seen = []
    module = Twice()
    module.register_full_backward_hook(lambda m, gi, go: seen.append((_np(gi[0]), _np(go[0]))))
    z = _leaf(lib, np.array([1 + 2j, 3 - 1j]))
    module(z).abs().sum().backward()
    return seen, _np(z.grad)


def test_backward_hooks_of_a_module_of_a_complex_tensor_see_torchs_gradients():
    ours, theirs = _complex_hooked(dg), _complex_hooked(torch)
    _same(ours[1], theirs[1])
    assert len(ours[0]) == len(theirs[0]) == 1
    _same(ours[0][0], theirs[0][0])
