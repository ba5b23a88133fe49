"""daskgrad's nn modules against torch's own samples: every ``daskgrad.nn`` module torch's ``module_db``
(torch.testing._internal.common_modules) has is built from each of its samples' constructor arguments,
given torch's parameters and buffers, and run on the sample's inputs chunked in two along the first axis
(the batch, float64, CPU): outputs, the inputs' and parameters' gradients for one random cotangent, and the buffers
afterwards (BatchNorm's running statistics) equal torch's (of the recurrent layers' many slow samples, a few:
SAMPLES).  Samples are made in training mode (and in
eval mode too for the modules whose forward depends on it).  A new module, or a new sample in a torch
release, is checked the day it appears; a sample daskgrad does not support is listed in GAPS with why."""
import functools

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

# (module, sample description) -> why daskgrad differs (a strict expectation: it must still fail)
GAPS = {}
# also run on eval-mode samples
MODE_DEPENDENT = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Dropout", "InstanceNorm1d", "InstanceNorm2d",
                  "InstanceNorm3d"}
# Modules whose samples are slow (a Python loop of steps, each a few recorded ops: 0.4-0.9 s a sample, 80 samples
# 52 s): only these of torch's samples, picked so that each option (nonlinearity, bias, batch_first,
# bidirectional, proj_size, an initial state or none) takes each of its values in some sample.  torch's order:
# two samples (no state, a state) per combination of the options, in itertools.product's order of
# (nonlinearity,) bias, batch_first, bidirectional(, proj_size); tests/test_nn_rnn.py checks the rest.
SAMPLES = {"RNN": (0, 11, 23, 26, 29), "GRU": (0, 11, 15), "LSTM": (0, 7, 18, 25, 31),
           # attention (0.3-2 s a sample, 64 samples a module): each option (batch_first, bias, add_bias_kv,
           # add_zero_attn, norm_first, activation, unbatched, each mask) takes each of its values in some sample;
           # tests/test_nn_transformer.py checks the rest
           "MultiheadAttention": (6, 25, 31, 41, 52), "TransformerEncoderLayer": (1, 2, 27, 34, 37),
           "TransformerEncoder": (1, 30, 31, 38), "TransformerDecoderLayer": (0, 1, 2, 52, 66),
           "Transformer": (1, 62, 63)}


def _daskgrad_modules():
    return sorted(n for n in dir(dg.nn) if isinstance(getattr(dg.nn, n), type)
                  and issubclass(getattr(dg.nn, n), dg.nn.Module) and n != "Module" and hasattr(torch.nn, n))


@functools.cache
def _module_db():
    from torch.testing._internal.common_modules import module_db  # slow to import: once, at first use

    return {m.module_cls.__name__: m for m in module_db}


def _layer_to_dg(layer):
    """A torch ``TransformerEncoderLayer`` (a ``TransformerEncoder`` sample's argument) as daskgrad's, built from
    its options (its parameters come with the encoder's state_dict)."""
    return dg.nn.TransformerEncoderLayer(layer.linear1.in_features, layer.self_attn.num_heads,
                                         layer.linear1.out_features, layer.dropout.p, _to_dg(layer.activation),
                                         layer.norm1.eps, layer.self_attn.batch_first, layer.norm_first,
                                         layer.linear1.bias is not None)


def _to_dg(x):
    """torch's sample values as a daskgrad user passes them: tensors chunked in two along the batch axis, torch's
    functions (an activation) as daskgrad's, a torch encoder layer as daskgrad's."""
    if isinstance(x, torch.nn.TransformerEncoderLayer):
        return _layer_to_dg(x)
    if callable(x) and getattr(torch.nn.functional, getattr(x, "__name__", ""), None) is x:
        return getattr(dg.nn.functional, x.__name__)
    if isinstance(x, torch.Tensor):
        a = x.detach().numpy()
        t = dg.from_array(a, chunks=((max(1, (a.shape[0] + 1) // 2),) + a.shape[1:]) if a.ndim else ())
        return t.requires_grad_(True) if x.requires_grad else t
    if isinstance(x, (list, tuple)):
        return type(x)(_to_dg(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_dg(v) for k, v in x.items()}
    if isinstance(x, torch.dtype):
        return np.dtype(str(x).removeprefix("torch."))
    return x


def _close(ours, theirs, what):
    theirs = theirs.detach().numpy()
    assert np.shape(ours) == theirs.shape, f"{what}: shape {np.shape(ours)}, torch's {theirs.shape}"
    np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-9, err_msg=what)


def _check(name, info, sample, training):
    args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    theirs = info.module_cls(*args, **kwargs).double().train(training)
    ours = getattr(dg.nn, name)(*_to_dg(args), **_to_dg(kwargs)).double().train(training)
    if any(torch.nn.parameter.is_lazy(t) for t in [*theirs.parameters(), *theirs.buffers()]):
        # a lazy module (LazyConv*): a dry run on the sample's inputs materializes both, which become the real class
        with torch.no_grad():
            theirs(*sample.forward_input.args, **sample.forward_input.kwargs)
        with dg.no_grad():
            ours(*_to_dg(sample.forward_input.args), **_to_dg(sample.forward_input.kwargs))
        assert type(ours).__name__ == type(theirs).__name__, f"became {type(ours).__name__}"
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    if state:
        ours.load_state_dict(state)
    t_in = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in sample.forward_input.args]
    d_in = [_to_dg(a) for a in t_in]
    t_out = theirs(*t_in, **sample.forward_input.kwargs)
    d_out = ours(*d_in, **_to_dg(sample.forward_input.kwargs))
    if isinstance(t_out, tuple):
        t_out, d_out = t_out[0], d_out[0]
    pairs = [(d_out, t_out, "output")]
    if t_out.requires_grad:
        w = torch.randn(t_out.shape)
        (t_out * w).sum().backward()
        (d_out * _to_dg(w)).sum().backward()
        pairs += [(d.grad, t.grad, f"input {i}'s gradient") for i, (d, t) in enumerate(zip(d_in, t_in))
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        d_params = dict(ours.named_parameters())
        pairs += [(d_params[k].grad, p.grad, f"{k}'s gradient") for k, p in theirs.named_parameters()
                  if p.grad is not None]
    d_buffers = dict(ours.named_buffers())
    pairs += [(d_buffers[k], b, f"buffer {k}") for k, b in theirs.named_buffers()]
    values = dg.compute(*[d.detach() for d, _, _ in pairs])  # one submission
    for value, (_, t, what) in zip(values, pairs):
        _close(value, t, what)


def _cases():
    """(module, training) pairs: every module in training mode, those whose forward depends on it in eval too."""
    return [(n, True) for n in _daskgrad_modules()] + [(n, False) for n in _daskgrad_modules() if n in MODE_DEPENDENT]


@pytest.mark.parametrize("name,training", _cases(), ids=[f"{n}-{'train' if t else 'eval'}" for n, t in _cases()])
def test_module_gives_torchs_outputs_gradients_and_buffers_on_every_module_db_sample(name, training):
    info = _module_db().get(name)
    if info is None:
        pytest.skip(f"torch's module_db has no {name} (tests/test_nn_parity.py checks it against torch)")
    torch.manual_seed(0)  # the samples' values are drawn from torch's generator
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float64, requires_grad=True,
                                      training=training)
    if name in SAMPLES:
        samples = [samples[i] for i in SAMPLES[name] if i < len(samples)]
    failures = []
    for sample in samples:
        gap = GAPS.get((name, sample.desc))
        try:
            _check(name, info, sample, training)
        except Exception as e:  # noqa: BLE001  (each sample's failure is reported, and the gaps expected)
            if gap is None:
                failures.append(f"{sample.desc or '(default)'}: {type(e).__name__}: {e}")
        else:
            if gap is not None:
                failures.append(f"{sample.desc}: listed in GAPS ({gap}) but now gives torch's result")
    assert not failures, f"{len(failures)} of {len(samples)} samples:\n" + "\n".join(failures)
