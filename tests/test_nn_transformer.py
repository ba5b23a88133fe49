"""Attention against torch (installed): F.scaled_dot_product_attention, nn.MultiheadAttention and the Transformer
layers (TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer),
float64, with torch's state_dict loaded: outputs and the gradients of the inputs and of every parameter equal
torch's at rtol 1e-10, the batch in one chunk, even and uneven chunks; masks (boolean, float, causal, key padding),
unbatched inputs, eval mode (dropout off) and train mode with dropout 0; torch's parameter names, errors and
warnings."""
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
CHUNKINGS = {"one": lambda n: -1, "even": lambda n: max(1, n // 2), "uneven": lambda n: (1, n - 1)}


def _leaf(shape, chunking="one", axis=0):
    """A float64 leaf pair (ours, torch's), chunked along ``axis`` (the batch)."""
    a = RNG.standard_normal(shape)
    chunks = tuple(CHUNKINGS[chunking](n) if i == axis else -1 for i, n in enumerate(shape))
    return dg.from_array(a, chunks=chunks).requires_grad_(True), torch.tensor(a, requires_grad=True)


def _const(a):
    return dg.from_array(a), torch.tensor(a)


def _pair(name, *args, **kwargs):
    """torch's module and ours (float64), torch's state_dict loaded into ours (strict: the same names)."""
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = getattr(nn, name)(*args, **kwargs).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _compare(d_outs, t_outs, leaves, modules=None, rtol=1e-10):
    """Values, then one backward each with the same random cotangent: the leaves' and parameters' gradients."""
    d_outs, t_outs = [d for d in d_outs if d is not None], [t for t in t_outs if t is not None]
    assert [tuple(d.shape) for d in d_outs] == [tuple(t.shape) for t in t_outs]
    ws = [RNG.standard_normal(tuple(t.shape)) for t in t_outs]
    sum((d * dg.from_array(w)).sum() for d, w in zip(d_outs, ws)).backward()
    sum((t * torch.tensor(w)).sum() for t, w in zip(t_outs, ws)).backward()
    pairs = [(d, t, "output") for d, t in zip(d_outs, t_outs)] + [(d.grad, t.grad, f"leaf {i}'s gradient")
                                                                   for i, (d, t) in enumerate(leaves)]
    if modules is not None:
        ours, theirs = modules
        d_params = dict(ours.named_parameters())
        assert list(d_params) == [k for k, _ in theirs.named_parameters()]
        pairs += [(d_params[k].grad, p.grad, f"{k}'s gradient") for k, p in theirs.named_parameters()
                  if p.grad is not None]
    values = dg.compute(*[d.detach() for d, _, _ in pairs])
    for v, (_, t, what) in zip(values, pairs):
        np.testing.assert_allclose(v, t.detach().numpy(), rtol=rtol, atol=1e-12, err_msg=what)


# ------------------------------------------------------------------------------ scaled_dot_product_attention
def _row_masked(shape):
    m = RNG.random(shape) > 0.4
    m[..., 0, :] = False  # a query that sees no key: zeros (torch's safe softmax)
    return m


SDPA = {"plain": ((4, 2, 3, 5), (4, 2, 6, 5), (4, 2, 6, 7), {}),
        "causal": ((4, 2, 5, 3), (4, 2, 5, 3), (4, 2, 5, 2), {"is_causal": True}),
        "causal-rectangular": ((4, 2, 6, 3), (4, 2, 4, 3), (4, 2, 4, 2), {"is_causal": True}),
        "bool-mask": ((4, 2, 3, 5), (4, 2, 6, 5), (4, 2, 6, 7), {"attn_mask": _row_masked((3, 6))}),
        "bool-mask-batched": ((4, 2, 3, 5), (4, 2, 6, 5), (4, 2, 6, 7), {"attn_mask": _row_masked((4, 1, 3, 6))}),
        "float-mask": ((4, 2, 3, 5), (4, 2, 6, 5), (4, 2, 6, 7), {"attn_mask": RNG.standard_normal((2, 3, 6))}),
        "scale": ((4, 3, 5), (4, 6, 5), (4, 6, 7), {"scale": 0.3}),
        "gqa": ((4, 4, 3, 5), (4, 2, 6, 5), (4, 2, 6, 7), {"enable_gqa": True}),
        "three-axes": ((4, 3, 5), (4, 6, 5), (4, 6, 7), {})}


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", list(SDPA))
def test_scaled_dot_product_attention_values_and_gradients_are_torch_s(case, chunking):
    qs, ks, vs, kwargs = SDPA[case]
    leaves = [_leaf(s, chunking) for s in (qs, ks, vs)]
    d_kw = {k: dg.from_array(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    t_kw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    d_out = F.scaled_dot_product_attention(*[d for d, _ in leaves], **d_kw)
    t_out = torch.nn.functional.scaled_dot_product_attention(*[t for _, t in leaves], **t_kw)
    _compare([d_out], [t_out], leaves)


def test_scaled_dot_product_attention_float_mask_gets_torch_s_gradient():
    leaves = [_leaf(s, "even") for s in ((4, 3, 5), (4, 6, 5), (4, 6, 2), (3, 6))]
    d_out = F.scaled_dot_product_attention(*[d for d, _ in leaves[:3]], attn_mask=leaves[3][0])
    t_out = torch.nn.functional.scaled_dot_product_attention(*[t for _, t in leaves[:3]], attn_mask=leaves[3][1])
    _compare([d_out], [t_out], leaves)


def test_scaled_dot_product_attention_dropout_one_gives_zeros():
    q = dg.from_array(RNG.standard_normal((2, 3, 4)))
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, q, q, dropout_p=1.0).numpy(), 0.0)


def _error(fn):
    with pytest.raises(Exception) as e:
        fn()
    return type(e.value), str(e.value)


@pytest.mark.parametrize("case", ["causal-and-mask", "dtypes", "one-axis", "gqa-heads", "gqa-two-axes"])
def test_scaled_dot_product_attention_errors_are_torch_s(case):
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((1, 2, 3, 4))
    args = {"causal-and-mask": ((a, a, a), {"attn_mask": np.ones((3, 3), bool), "is_causal": True}),
            "dtypes": ((a, a, a.astype(np.float32)), {}),
            "one-axis": ((a[0, 0], a[0, 0], a[0, 0]), {}),
            "gqa-heads": ((np.concatenate([b, b[:, :1]], 1), b, b), {"enable_gqa": True}),
            "gqa-two-axes": ((a[0], a[0], a[0]), {"enable_gqa": True})}[case]
    ours = _error(lambda: F.scaled_dot_product_attention(*map(dg.from_array, args[0]),
                                                         **{k: dg.from_array(v) if isinstance(v, np.ndarray) else v
                                                            for k, v in args[1].items()}))
    theirs = _error(lambda: torch.nn.functional.scaled_dot_product_attention(
        *map(torch.tensor, args[0]), **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                                        for k, v in args[1].items()}))
    assert ours == theirs


# ------------------------------------------------------------------------------------- MultiheadAttention
MHA = {"default": ({}, {}),
       "kdim-vdim": ({"kdim": 3, "vdim": 5}, {}),
       "bias-kv-zero-attn": ({"add_bias_kv": True, "add_zero_attn": True}, {}),
       "no-bias": ({"bias": False}, {}),
       "batch-first": ({"batch_first": True}, {}),
       "bool-masks": ({}, {"attn_mask": "bool2", "key_padding_mask": "bool"}),
       "float-masks-3d": ({"add_zero_attn": True}, {"attn_mask": "float3", "key_padding_mask": "float"}),
       "per-head-weights": ({}, {"average_attn_weights": False, "attn_mask": "bool3"}),
       "no-weights": ({}, {"need_weights": False, "key_padding_mask": "bool"}),
       "no-weights-causal": ({"batch_first": True}, {"need_weights": False, "attn_mask": "causal",
                                                     "is_causal": True}),
       "weights-causal": ({}, {"attn_mask": "causal", "is_causal": True})}


def _masks(kwargs, L, S, N, heads):
    made = {"bool2": lambda: (RNG.random((L, S)) > 0.7) & (np.arange(S) > 0),  # key 0 seen: no nan row
            "bool3": lambda: RNG.random((N * heads, L, S)) > 0.7,
            "float3": lambda: RNG.standard_normal((N * heads, L, S)),
            "causal": lambda: np.triu(np.full((L, S), -np.inf), 1),
            "bool": lambda: np.arange(S)[None, :] >= np.array([S, S - 1, 2, S][:N])[:, None],
            "float": lambda: RNG.standard_normal((N, S))}
    d_kw, t_kw = {}, {}
    for k, v in kwargs.items():
        if isinstance(v, str):
            a = made[v]()
            d_kw[k], t_kw[k] = _const(a)
        else:
            d_kw[k] = t_kw[k] = v
    return d_kw, t_kw


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", list(MHA))
def test_multihead_attention_values_and_gradients_are_torch_s(case, chunking):
    ctor, fwd = MHA[case]
    E, heads, L, S, N = 6, 2, 4, 5, 4
    ours, theirs = _pair("MultiheadAttention", E, heads, **ctor)
    axis = 0 if ctor.get("batch_first") else 1
    shape = (lambda n, d: (N, n, d)) if axis == 0 else (lambda n, d: (n, N, d))
    if case == "no-weights-causal":
        S = L
    q = _leaf(shape(L, E), chunking, axis)
    k, v = _leaf(shape(S, ctor.get("kdim", E)), chunking, axis), _leaf(shape(S, ctor.get("vdim", E)), chunking, axis)
    d_kw, t_kw = _masks(fwd, L, S, N, heads)
    d_out = ours(q[0], k[0], v[0], **d_kw)
    t_out = theirs(q[1], k[1], v[1], **t_kw)
    _compare(list(d_out), list(t_out), [q, k, v], (ours, theirs))


def test_multihead_attention_self_attention_and_unbatched_inputs_are_torch_s():
    ours, theirs = _pair("MultiheadAttention", 4, 2, add_bias_kv=True)
    x = _leaf((5, 4), "uneven")
    mask = _const(np.arange(5) >= 4)
    d_out = ours(x[0], x[0], x[0], key_padding_mask=mask[0], average_attn_weights=False)
    t_out = theirs(x[1], x[1], x[1], key_padding_mask=mask[1], average_attn_weights=False)
    _compare(list(d_out), list(t_out), [x], (ours, theirs))


def test_multihead_attention_eval_mode_turns_dropout_off():
    ours, theirs = _pair("MultiheadAttention", 4, 2, dropout=0.5)
    ours.eval(), theirs.eval()
    x = _leaf((3, 2, 4), "even", 1)
    _compare(list(ours(x[0], x[0], x[0])), list(theirs(x[1], x[1], x[1])), [x], (ours, theirs))


def test_multihead_attention_parameters_are_torch_s_names_shapes_and_init():
    for kwargs in ({}, {"kdim": 3, "vdim": 5, "bias": False, "add_bias_kv": True}):
        ours, theirs = nn.MultiheadAttention(6, 3, **kwargs), torch.nn.MultiheadAttention(6, 3, **kwargs)
        assert [(k, tuple(p.shape)) for k, p in ours.named_parameters()] == \
            [(k, tuple(p.shape)) for k, p in theirs.named_parameters()]
        assert list(ours.state_dict()) == list(theirs.state_dict())
    m = nn.MultiheadAttention(6, 3)
    np.testing.assert_array_equal(m.in_proj_bias.detach().numpy(), 0.0)
    np.testing.assert_array_equal(m.out_proj.bias.detach().numpy(), 0.0)
    assert np.abs(m.in_proj_weight.detach().numpy()).max() <= np.sqrt(6 / (6 + 18))


def _mha_errors():
    x3, x2 = np.zeros((3, 2, 4)), np.zeros((3, 4))
    return {"not-divisible": (("ctor", 5, 2), None),
            "zero-heads": (("ctor", 4, 0), None),
            "key-2d": (("fwd", x3, x2, x2), {}),
            "query-4d": (("fwd",) + (np.zeros((1, 3, 2, 4)),) * 3, {}),
            "padding-mask-1d": (("fwd", x3, x3, x3), {"key_padding_mask": np.zeros(3, bool)}),
            "mask-shape": (("fwd", x3, x3, x3), {"attn_mask": np.zeros((3, 4), bool)}),
            "mask-3d-shape": (("fwd", x3, x3, x3), {"attn_mask": np.zeros((3, 3, 3), bool)}),
            "mask-int": (("fwd", x3, x3, x3), {"attn_mask": np.zeros((3, 3), np.int64)}),
            "causal-without-mask": (("fwd", x3, x3, x3), {"is_causal": True}),
            "embed-dim": (("fwd",) + (np.zeros((3, 2, 6)),) * 3, {})}


@pytest.mark.parametrize("case", list(_mha_errors()))
def test_multihead_attention_errors_are_torch_s(case):
    args, kwargs = _mha_errors()[case]
    if args[0] == "ctor":
        ours = _error(lambda: nn.MultiheadAttention(*args[1:]))
        theirs = _error(lambda: torch.nn.MultiheadAttention(*args[1:]))
    else:
        m, t = nn.MultiheadAttention(4, 2).double(), torch.nn.MultiheadAttention(4, 2).double()
        ours = _error(lambda: m(*map(dg.from_array, args[1:]), **{k: dg.from_array(v) for k, v in kwargs.items()}))
        theirs = _error(lambda: t(*map(torch.tensor, args[1:]), **{k: torch.tensor(v) for k, v in kwargs.items()}))
    assert ours[0] is theirs[0]
    assert ours[1] == theirs[1].replace("torch.Size", "daskgrad.Size")


def test_multihead_attention_mismatched_mask_types_warn_as_torch():
    x = np.zeros((3, 2, 4))
    kw = {"key_padding_mask": np.zeros((2, 3), bool), "attn_mask": np.zeros((3, 3))}
    with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and attn_mask is deprecated"):
        nn.MultiheadAttention(4, 2).double()(*[dg.from_array(x)] * 3, **{k: dg.from_array(v) for k, v in kw.items()})


# ------------------------------------------------------------------------------------------- Transformer
LAYER = {"post-norm": {}, "norm-first-gelu": {"norm_first": True, "activation": "gelu"},
         "batch-first-no-bias": {"batch_first": True, "bias": False}}


def _layer_kwargs(kwargs, torch_side):
    kw = dict(kwargs)
    if kw.get("activation") == "tanh-callable":
        kw["activation"] = torch.tanh if torch_side else dg.tanh
    return kw


def _masks_for(N, T, S):
    pad_t = np.arange(T)[None, :] >= np.array([T, T - 1, 2, T][:N])[:, None]
    pad_s = np.arange(S)[None, :] >= np.array([S - 1, S, S, 1][:N])[:, None]
    return pad_t, pad_s


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", list(LAYER))
def test_encoder_layer_values_and_gradients_are_torch_s(case, chunking, mode):
    dropout = 0.0 if mode == "train" else 0.3
    ours, theirs = _pair("TransformerEncoderLayer", 4, 2, 8, dropout, **LAYER[case])
    ours.train(mode == "train"), theirs.train(mode == "train")
    N, L = 4, 3
    bf = LAYER[case].get("batch_first", False)
    x = _leaf((N, L, 4) if bf else (L, N, 4), chunking, 0 if bf else 1)
    pad, _ = _masks_for(N, L, L)
    mask = np.triu(np.ones((L, L), bool), 1)
    d_out = ours(x[0], src_mask=dg.from_array(mask), src_key_padding_mask=dg.from_array(pad))
    t_out = theirs(x[1], src_mask=torch.tensor(mask), src_key_padding_mask=torch.tensor(pad))
    _compare([d_out], [t_out], [x], (ours, theirs))


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", list(LAYER))
def test_decoder_layer_values_and_gradients_are_torch_s(case, chunking):
    ours, theirs = _pair("TransformerDecoderLayer", 4, 2, 8, 0.0, **LAYER[case])
    N, T, S = 4, 3, 5
    bf = LAYER[case].get("batch_first", False)
    tgt = _leaf((N, T, 4) if bf else (T, N, 4), chunking, 0 if bf else 1)
    mem = _leaf((N, S, 4) if bf else (S, N, 4), chunking, 0 if bf else 1)
    pad_t, pad_s = _masks_for(N, T, S)
    causal = np.triu(np.ones((T, T), bool), 1)
    d_out = ours(tgt[0], mem[0], tgt_mask=dg.from_array(causal), tgt_key_padding_mask=dg.from_array(pad_t),
                 memory_key_padding_mask=dg.from_array(pad_s), tgt_is_causal=True)
    t_out = theirs(tgt[1], mem[1], tgt_mask=torch.tensor(causal), tgt_key_padding_mask=torch.tensor(pad_t),
                   memory_key_padding_mask=torch.tensor(pad_s), tgt_is_causal=True)
    _compare([d_out], [t_out], [tgt, mem], (ours, theirs))


def _encoder_pair(num_layers, norm, **layer_kwargs):
    layer_t = torch.nn.TransformerEncoderLayer(4, 2, 8, 0.0, **_layer_kwargs(layer_kwargs, True))
    layer_d = nn.TransformerEncoderLayer(4, 2, 8, 0.0, **_layer_kwargs(layer_kwargs, False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.nn.TransformerEncoder(layer_t, num_layers, torch.nn.LayerNorm(4) if norm else None).double()
        ours = nn.TransformerEncoder(layer_d, num_layers, nn.LayerNorm(4) if norm else None).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("layer_kwargs", [{}, {"batch_first": True, "norm_first": True,
                                               "activation": "tanh-callable"}], ids=["default", "callable"])
def test_encoder_values_and_gradients_are_torch_s(layer_kwargs, chunking):
    ours, theirs = _encoder_pair(2, True, **layer_kwargs)
    N, L = 4, 5
    bf = layer_kwargs.get("batch_first", False)
    x = _leaf((N, L, 4) if bf else (L, N, 4), chunking, 0 if bf else 1)
    pad, _ = _masks_for(N, L, L)
    causal = np.triu(np.ones((L, L), bool), 1)  # detected as causal (is_causal=None)
    d_out = ours(x[0], mask=dg.from_array(causal), src_key_padding_mask=dg.from_array(pad))
    t_out = theirs(x[1], mask=torch.tensor(causal), src_key_padding_mask=torch.tensor(pad))
    _compare([d_out], [t_out], [x], (ours, theirs))


def test_encoder_layers_are_copies_with_torch_s_names():
    ours, theirs = _encoder_pair(3, False)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_decoder_values_and_gradients_are_torch_s(chunking):
    layer_t, layer_d = torch.nn.TransformerDecoderLayer(4, 2, 8, 0.0), nn.TransformerDecoderLayer(4, 2, 8, 0.0)
    theirs = torch.nn.TransformerDecoder(layer_t, 2, torch.nn.LayerNorm(4)).double()
    ours = nn.TransformerDecoder(layer_d, 2, nn.LayerNorm(4)).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    tgt, mem = _leaf((3, 4, 4), chunking, 1), _leaf((5, 4, 4), chunking, 1)
    mask = np.triu(np.ones((3, 5), bool), 2)
    d_out = ours(tgt[0], mem[0], memory_mask=dg.from_array(mask))
    t_out = theirs(tgt[1], mem[1], memory_mask=torch.tensor(mask))
    _compare([d_out], [t_out], [tgt, mem], (ours, theirs))


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_transformer_values_and_gradients_are_torch_s(chunking, mode):
    kwargs = {"d_model": 4, "nhead": 2, "num_encoder_layers": 2, "num_decoder_layers": 1, "dim_feedforward": 8,
              "dropout": 0.0 if mode == "train" else 0.2, "batch_first": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = _pair("Transformer", **kwargs)
    ours.train(mode == "train"), theirs.train(mode == "train")
    N, S, T = 4, 5, 3
    src, tgt = _leaf((N, S, 4), chunking), _leaf((N, T, 4), chunking)
    pad_t, pad_s = _masks_for(N, T, S)
    tgt_mask = np.triu(np.ones((T, T), bool), 1)
    d_out = ours(src[0], tgt[0], tgt_mask=dg.from_array(tgt_mask), src_key_padding_mask=dg.from_array(pad_s),
                 tgt_key_padding_mask=dg.from_array(pad_t), memory_key_padding_mask=dg.from_array(pad_s))
    t_out = theirs(src[1], tgt[1], tgt_mask=torch.tensor(tgt_mask), src_key_padding_mask=torch.tensor(pad_s),
                   tgt_key_padding_mask=torch.tensor(pad_t), memory_key_padding_mask=torch.tensor(pad_s))
    _compare([d_out], [t_out], [src, tgt], (ours, theirs))


def test_transformer_unbatched_and_initialisation():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = _pair("Transformer", 4, 2, 1, 1, 8, 0.0)
        fresh = nn.Transformer(4, 2, 1, 1, 8)
    src, tgt = _leaf((5, 4)), _leaf((3, 4))
    _compare([ours(src[0], tgt[0])], [theirs(src[1], tgt[1])], [src, tgt], (ours, theirs))
    bound = np.sqrt(6 / (4 + 12))  # xavier_uniform_ of in_proj_weight (12, 4)
    w = fresh.encoder.layers[0].self_attn.in_proj_weight.detach().numpy()
    assert np.abs(w).max() <= bound
    np.testing.assert_array_equal(fresh.encoder.layers[0].self_attn.in_proj_bias.detach().numpy(), 0.0)


def test_generate_square_subsequent_mask_is_torch_s_and_used_as_a_causal_mask():
    np.testing.assert_array_equal(nn.Transformer.generate_square_subsequent_mask(4).numpy(),
                                  torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    ours, theirs = _pair("TransformerDecoderLayer", 4, 2, 8, 0.0)
    tgt, mem = _leaf((3, 2, 4), "even", 1), _leaf((5, 2, 4), "even", 1)
    mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=np.float64)
    d_out = ours(tgt[0], mem[0], tgt_mask=mask, tgt_is_causal=True)
    t_out = theirs(tgt[1], mem[1], tgt_mask=torch.tensor(mask.numpy()), tgt_is_causal=True)
    _compare([d_out], [t_out], [tgt, mem], (ours, theirs))


@pytest.mark.parametrize("case", ["batch-size", "d-model"])
def test_transformer_errors_are_torch_s(case):
    src = np.zeros((5, 2, 4))
    tgt = {"batch-size": np.zeros((3, 3, 4)), "d-model": np.zeros((3, 2, 6))}[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m, t = nn.Transformer(4, 2, 1, 1, 8).double(), torch.nn.Transformer(4, 2, 1, 1, 8).double()
    assert _error(lambda: m(dg.from_array(src), dg.from_array(tgt))) == \
        _error(lambda: t(torch.tensor(src), torch.tensor(tgt)))


@pytest.mark.parametrize("kwargs", [{}, {"batch_first": True}, {"batch_first": True, "norm_first": True},
                                    {"batch_first": True, "bias": False}, {"batch_first": True, "nhead": 1}])
def test_encoder_nested_tensor_warning_is_torch_s(kwargs):
    kwargs = {"d_model": 4, "nhead": 2, **kwargs}
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**kwargs), 1)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        nn.TransformerEncoder(nn.TransformerEncoderLayer(**kwargs), 1)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs if "nested" in str(w.message)]


def test_activation_errors_are_torch_s():
    assert _error(lambda: nn.TransformerEncoderLayer(4, 2, activation="tanh")) == \
        _error(lambda: torch.nn.TransformerEncoderLayer(4, 2, activation="tanh"))


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_dropout_one_in_training_is_torch_s(need_weights):
    """The only dropout whose draw both agree on: every attention weight dropped, the output is out_proj's bias."""
    ours, theirs = _pair("MultiheadAttention", 4, 2, dropout=1.0)
    with torch.no_grad():
        theirs.out_proj.bias.copy_(torch.arange(4.0))
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = _leaf((3, 2, 4), "even", 1)
    _compare(list(ours(x[0], x[0], x[0], need_weights=need_weights)),
             list(theirs(x[1], x[1], x[1], need_weights=need_weights)), [x], (ours, theirs))


@pytest.mark.parametrize("need_weights", [True, False])
def test_multi_head_attention_forward_with_static_keys_is_torch_s(need_weights):
    """The functional form, with what only it takes: ``static_k``/``static_v`` (batch * heads, S, head_dim)."""
    E, heads, L, S, N = 4, 2, 3, 5, 2
    q = _leaf((L, N, E), "uneven", 1)
    w_in, b_in, w_out, b_out = (_leaf(s) for s in ((3 * E, E), (3 * E,), (E, E), (E,)))
    sk, sv = _leaf((N * heads, S, E // heads)), _leaf((N * heads, S, E // heads))
    args = [q, q, q, None, heads, w_in, b_in, None, None, False, 0.0, w_out, b_out]
    d_args = [a[0] if isinstance(a, tuple) else a for a in args]
    t_args = [a[1] if isinstance(a, tuple) else a for a in args]
    d_args[3] = t_args[3] = E
    d_out = F.multi_head_attention_forward(*d_args, static_k=sk[0], static_v=sv[0], need_weights=need_weights)
    t_out = torch.nn.functional.multi_head_attention_forward(*t_args, static_k=sk[1], static_v=sv[1],
                                                             need_weights=need_weights)
    _compare(list(d_out), list(t_out), [q, w_in, b_in, w_out, b_out, sk, sv])


def test_multihead_attention_repr_is_torch_s():
    assert repr(nn.MultiheadAttention(4, 2)) == repr(torch.nn.MultiheadAttention(4, 2))


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("norm", [False, True])
def test_encoder_in_eval_with_a_padding_mask_zeros_padded_positions_where_torch_s_nested_path_does(norm, aligned,
                                                                                                   grad):
    """torch's encoder in eval, without grad, with a left-aligned padding mask runs on nested tensors: its output
    at padded positions is zero (then ``norm``); otherwise (grad, a mask not left-aligned) the layers' values."""
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's: the nested path of a layer with an odd setting; none here)
        te = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(8, dtype=torch.float64) if norm else None)
    te.eval()
    dl = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, dtype="float64")
    de = nn.TransformerEncoder(dl, 2, norm=nn.LayerNorm(8, dtype="float64") if norm else None).eval()
    de.load_state_dict({k: v.numpy() for k, v in te.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, 5, 8))
    m = np.zeros((3, 5), bool)
    m[0, 3:] = m[1, 4:] = True
    if not aligned:
        m[2, 1] = True
    with torch.set_grad_enabled(grad):
        want = te(torch.from_numpy(x), src_key_padding_mask=torch.from_numpy(m))
        want = (want.to_padded_tensor(0.0) if want.is_nested else want).detach().numpy()
    with dg.set_grad_enabled(grad):
        got = de(dg.from_array(x, chunks=(2, 5, 8)), src_key_padding_mask=dg.from_array(m, chunks=(2, 5)))
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    assert (np.abs(want[0, 3:]).max() == 0) == (aligned and not grad)  # (a LayerNorm of zeros: its bias, 0)
